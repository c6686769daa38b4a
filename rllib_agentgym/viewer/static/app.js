// rllib-agentgym trajectory viewer: one page, no dependencies.
// Every piece of run text is inserted with textContent (observations can hold HTML).
"use strict";

const CURVES = ["reward", "success", "horizon", "kl"];
const SVG_NS = "http://www.w3.org/2000/svg";
const $ = (sel) => document.querySelector(sel);

const state = {
  trial: "",
  metrics: null,
  extraMetrics: [],
  rows: [],
  sortKey: null,
  sortDir: 1,
  selected: null, // {iteration, index}
  iterations: [],
  timer: null,
};

// ---- helpers -------------------------------------------------------------------

async function api(route, params = {}) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== "" && v !== null && v !== undefined) query.set(k, v);
  }
  const response = await fetch(`api/${route}?${query}`);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmt(v, digits = 3) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
  return String(Number(v.toFixed(digits)));
}

function pct(v) {
  return v === null || v === undefined ? "–" : `${Math.round(v * 100)}%`;
}

function filters() {
  return {
    iteration: $("#f-iteration").value,
    category: $("#f-category").value,
    task: $("#f-task").value,
    min_reward: $("#f-min").value,
    max_reward: $("#f-max").value,
    success: $("#f-success").value,
  };
}

function saveHash() {
  const params = new URLSearchParams({ trial: state.trial, ...filters() });
  if (state.selected) params.set("sel", `${state.selected.iteration}:${state.selected.index}`);
  for (const [k, v] of [...params]) if (v === "") params.delete(k);
  history.replaceState(null, "", `#${params}`);
}

function hashParams() {
  return new URLSearchParams(location.hash.slice(1));
}

function setSelectOptions(select, values, labels, keepFirst = true) {
  const current = select.value;
  const first = keepFirst ? select.options[0] : null;
  select.replaceChildren(...(first ? [first] : []));
  values.forEach((v, i) => select.append(el("option", { value: String(v), text: labels ? labels[i] : String(v) })));
  if ([...select.options].some((o) => o.value === current)) select.value = current;
}

// ---- trials ----------------------------------------------------------------------

async function loadTrials(initial) {
  const trials = await api("trials");
  const select = $("#trial");
  setSelectOptions(select, trials.map((t) => t.name), null, false);
  if (!trials.length) {
    $("#trial-info").textContent = "no trials found yet";
    return false;
  }
  const wanted = initial ? hashParams().get("trial") : state.trial;
  select.value = trials.some((t) => t.name === wanted) ? wanted : trials[0].name;
  state.trial = select.value;
  const info = trials.find((t) => t.name === state.trial);
  $("#trial-info").textContent =
    `${info.num_results} results · ${info.num_trajectory_files} iterations with trajectories`;
  return true;
}

// ---- curves ----------------------------------------------------------------------

// A tick label with just the decimals its step needs (0.002, 0.004, ... not 0, 0, 0.01).
function tickLabel(t, step) {
  if (t === 0) return "0";
  if (Math.abs(t) >= 1e4) return `${Number((t / 1000).toFixed(Math.max(0, Math.ceil(-Math.log10(step / 1000)))))}k`;
  if (step < 1e-3) return t.toExponential(1);
  return t.toFixed(Math.max(0, Math.ceil(-Math.log10(step) - 1e-9)));
}

function niceTicks(lo, hi, count = 4) {
  if (lo === hi) {
    const pad = Math.abs(lo) > 0 ? Math.abs(lo) * 0.1 : 1;
    lo -= pad;
    hi += pad;
  }
  const raw = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const start = Math.floor(lo / step) * step;
  const end = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let t = start; t <= end + step / 2; t += step) ticks.push(Number(t.toPrecision(10)));
  return ticks;
}

function lineChart(title, key, xs, ys, { removable = false } = {}) {
  const box = el("div", { class: "chart", "data-metric": key || "" });
  const points = xs.map((x, i) => [x, ys[i]]).filter(([x, y]) => x !== null && y !== null);
  const last = points.length ? points[points.length - 1][1] : null;
  const head = el("div", { class: "chart-title" }, el("span", { text: title, title: key || "" }));
  const value = el("span", { class: "value", text: fmt(last) });
  head.append(value);
  if (removable) {
    const close = el("button", { class: "close", type: "button", title: "remove", text: "×" });
    close.addEventListener("click", () => {
      state.extraMetrics = state.extraMetrics.filter((m) => m !== key);
      renderCurves();
    });
    head.append(close);
  }
  box.append(head);
  const chart = svg("svg", { preserveAspectRatio: "none" });
  box.append(chart);
  // Drawn once in the document, at its real pixel width (text would stretch otherwise).
  box.draw = () => drawChart(chart, value, Math.max(120, Math.round(chart.getBoundingClientRect().width)), 110, points);
  return box;
}

function drawChart(chart, valueLabel, W, H, points) {
  chart.replaceChildren();
  chart.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const m = { l: 38, r: 8, t: 6, b: 16 };
  if (!points.length) {
    chart.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "nodata" }, "no data"));
    return;
  }
  const xsv = points.map((p) => p[0]);
  const ysv = points.map((p) => p[1]);
  const yt = niceTicks(Math.min(...ysv), Math.max(...ysv));
  const [y0, y1] = [yt[0], yt[yt.length - 1]];
  const [x0, x1] = [Math.min(...xsv), Math.max(...xsv) === Math.min(...xsv) ? Math.min(...xsv) + 1 : Math.max(...xsv)];
  const X = (x) => m.l + ((x - x0) / (x1 - x0)) * (W - m.l - m.r);
  const Y = (y) => H - m.b - ((y - y0) / (y1 - y0)) * (H - m.t - m.b);
  for (const t of yt) {
    chart.append(svg("line", { x1: m.l, x2: W - m.r, y1: Y(t), y2: Y(t), class: "grid" }));
    chart.append(svg("text", { x: m.l - 4, y: Y(t) + 3, "text-anchor": "end", class: "tick" }, tickLabel(t, yt[1] - yt[0])));
  }
  const xt = niceTicks(x0, x1, Math.max(2, Math.floor(W / 70))).filter((t) => t >= x0 && t <= x1 && Number.isInteger(t));
  for (const t of xt) {
    chart.append(svg("text", { x: X(t), y: H - 3, "text-anchor": "middle", class: "tick" }, String(t)));
  }
  chart.append(svg("line", { x1: m.l, x2: m.l, y1: m.t, y2: H - m.b, class: "axis" }));
  chart.append(svg("line", { x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b, class: "axis" }));
  const d = points.map(([x, y], i) => `${i ? "L" : "M"}${X(x).toFixed(1)},${Y(y).toFixed(1)}`).join("");
  chart.append(svg("path", { d, class: "line" }));
  if (points.length <= 40) {
    for (const [x, y] of points) chart.append(svg("circle", { cx: X(x), cy: Y(y), r: 2, class: "dot" }));
  }
  if (state.selected || $("#f-iteration").value) {
    const it = Number(state.selected ? state.selected.iteration : $("#f-iteration").value);
    if (it >= x0 && it <= x1) chart.append(svg("line", { x1: X(it), x2: X(it), y1: m.t, y2: H - m.b, class: "cursor" }));
  }
  const hover = svg("line", { y1: m.t, y2: H - m.b, class: "hover", visibility: "hidden" });
  chart.append(hover);
  const nearest = (evt) => {
    const rect = chart.getBoundingClientRect();
    const px = ((evt.clientX - rect.left) / rect.width) * W;
    let best = points[0];
    for (const p of points) if (Math.abs(X(p[0]) - px) < Math.abs(X(best[0]) - px)) best = p;
    return best;
  };
  const lastValue = fmt(points[points.length - 1][1]);
  chart.onmousemove = (evt) => {
    const [x, y] = nearest(evt);
    hover.setAttribute("x1", X(x));
    hover.setAttribute("x2", X(x));
    hover.setAttribute("visibility", "visible");
    valueLabel.textContent = `it ${x}: ${fmt(y)}`;
  };
  chart.onmouseleave = () => {
    hover.setAttribute("visibility", "hidden");
    valueLabel.textContent = lastValue;
  };
  chart.onclick = (evt) => {
    const [x] = nearest(evt);
    if (state.iterations.some((it) => it.iteration === x)) selectIteration(String(x));
  };
}

async function loadMetrics() {
  state.metrics = await api("metrics", { trial: state.trial });
  const curveKeys = new Set(Object.values(state.metrics.curves));
  const others = Object.keys(state.metrics.series).filter((k) => k !== state.metrics.x && !curveKeys.has(k)).sort();
  setSelectOptions($("#extra-metric"), others);
  $("#extra-metric").value = "";
  renderCurves();
}

function renderCurves() {
  const container = $("#curves");
  container.replaceChildren();
  const metrics = state.metrics;
  if (!metrics) return;
  const xs = metrics.series[metrics.x] || [];
  const charts = CURVES.map((c) => {
    const key = metrics.curves[c];
    return lineChart(metrics.titles[c], key, xs, key ? metrics.series[key] : []);
  });
  for (const key of state.extraMetrics) {
    if (metrics.series[key]) charts.push(lineChart(key.split("/").slice(-2).join("/"), key, xs, metrics.series[key], { removable: true }));
  }
  container.append(...charts);
  for (const chart of charts) chart.draw();
}

// ---- iterations ------------------------------------------------------------------

async function loadIterations() {
  const data = await api("iterations", { trial: state.trial });
  state.iterations = data.iterations;
  const newestFirst = [...data.iterations].reverse();
  setSelectOptions($("#f-iteration"), newestFirst.map((it) => it.iteration));
  setSelectOptions($("#f-category"), data.categories);
  renderIterations();
}

function renderIterations() {
  const current = $("#f-iteration").value;
  const all = el("li", { "data-iteration": "" }, el("span", { class: "it", text: "All iterations" }),
    el("span", { class: "n", text: String(state.iterations.reduce((s, it) => s + it.count, 0)) }));
  const items = [all];
  for (const it of [...state.iterations].reverse()) {
    items.push(el("li", { "data-iteration": String(it.iteration) },
      el("span", { class: "it", text: `Iteration ${it.iteration}` }),
      el("span", { class: "n", text: String(it.count) }),
      el("span", { class: "stats", text: `reward ${fmt(it.mean_reward, 2)} · success ${pct(it.success_rate)} · turns ${fmt(it.mean_turns, 1)}` })));
  }
  for (const li of items) {
    li.classList.toggle("selected", li.dataset.iteration === current);
    li.addEventListener("click", () => selectIteration(li.dataset.iteration));
  }
  $("#iterations").replaceChildren(...items);
}

function selectIteration(iteration) {
  $("#f-iteration").value = iteration;
  renderIterations();
  loadTrajectories();
}

// ---- trajectory list -------------------------------------------------------------

async function loadTrajectories() {
  saveHash();
  let data;
  try {
    data = await api("trajectories", { trial: state.trial, ...filters(), limit: 2000 });
  } catch (err) {
    $("#count").textContent = `(${err.message})`;
    state.rows = [];
    renderRows();
    return;
  }
  state.rows = data.trajectories;
  const shown = data.total > data.trajectories.length ? ` (first ${data.trajectories.length})` : "";
  $("#count").textContent = `${data.total}${shown}`;
  renderRows();
  renderCurves();
}

function renderRows() {
  const rows = [...state.rows];
  if (state.sortKey) {
    const k = state.sortKey;
    rows.sort((a, b) => (a[k] > b[k] ? 1 : a[k] < b[k] ? -1 : 0) * state.sortDir);
  }
  for (const th of document.querySelectorAll("#trajectories th")) {
    th.classList.toggle("sorted-asc", th.dataset.key === state.sortKey && state.sortDir === 1);
    th.classList.toggle("sorted-desc", th.dataset.key === state.sortKey && state.sortDir === -1);
  }
  const body = rows.map((r) => {
    const tr = el("tr", { "data-iteration": String(r.iteration), "data-index": String(r.index) },
      el("td", { text: String(r.iteration) }),
      el("td", { text: fmt(r.data_idx) }),
      el("td", { text: r.category || "" }),
      el("td", { text: fmt(r.reward) }),
      el("td", {}, el("span", { class: `badge ${r.success ? "ok" : "bad"}`, text: r.success ? "✓" : "✗" })),
      el("td", { text: fmt(r.num_turns) + (r.truncated ? " ✂" : "") }),
      el("td", { text: fmt(r.num_generated_tokens) }));
    if (state.selected && state.selected.iteration === r.iteration && state.selected.index === r.index) tr.classList.add("selected");
    tr.addEventListener("click", () => selectTrajectory(r.iteration, r.index));
    return tr;
  });
  $("#trajectories tbody").replaceChildren(...body);
  $("#list-empty").hidden = rows.length > 0;
}

// ---- one trajectory --------------------------------------------------------------

async function selectTrajectory(iteration, index) {
  state.selected = { iteration, index };
  for (const tr of document.querySelectorAll("#trajectories tbody tr")) {
    tr.classList.toggle("selected", Number(tr.dataset.iteration) === iteration && Number(tr.dataset.index) === index);
  }
  saveHash();
  renderCurves();
  let t;
  try {
    t = await api("trajectory", { trial: state.trial, iteration, index });
  } catch (err) {
    $("#detail").hidden = true;
    $("#detail-empty").hidden = false;
    $("#detail-empty").textContent = err.message;
    return;
  }
  renderTrajectory(t);
}

function kv(key, value) {
  return el("span", { class: "kv" }, `${key} `, el("b", { text: value }));
}

function renderTrajectory(t) {
  const status = t.success ? ["ok", "success"] : t.done ? ["bad", "failed"] : t.truncated ? ["neutral", "truncated"] : ["neutral", "horizon reached"];
  $("#detail-meta").replaceChildren(
    el("span", { class: "title", text: `${t.env || "task"} #${t.data_idx}` }),
    el("span", { class: `badge ${status[0]}`, text: status[1] }),
    kv("category", t.category || "–"),
    kv("reward", fmt(t.reward)),
    kv("turns", fmt(t.num_turns)),
    kv("iteration", String(t.iteration)),
    kv("group", fmt(t.group_id)),
    kv("tokens", `${fmt(t.num_generated_tokens)} generated / ${fmt(t.num_tokens)}`),
  );
  const rows = (t.turns || []).map((turn, i) => {
    const agent = el("td", { class: "agent" },
      el("div", { class: "response" }, el("pre", { text: turn.response || "" })),
      el("div", { class: `action${turn.valid_format === false ? " invalid" : ""}`,
        text: turn.valid_format === false ? `✗ unparseable: ${turn.action || "(no action)"}` : `→ ${turn.action}` }));
    if (turn.reward) agent.append(el("div", { class: "turn-reward" }, "reward ", el("b", { text: fmt(turn.reward) })));
    return el("tr", { class: "turn" },
      el("td", { class: "turn-no", text: String(i + 1) }),
      el("td", { class: "observation" }, el("pre", { text: turn.observation || "" })),
      agent);
  });
  $("#turns tbody").replaceChildren(...rows);
  const fin = $("#final-observation");
  fin.replaceChildren();
  if (t.final_observation) {
    fin.append(el("h3", { text: "Final observation" }), el("div", { class: "observation" }, el("pre", { text: t.final_observation })));
  }
  $("#detail-empty").hidden = true;
  $("#detail").hidden = false;
  $("#detail-panel").scrollTop = 0;
}

// ---- wiring ----------------------------------------------------------------------

async function loadTrial(initial = false) {
  const hash = initial ? hashParams() : null;
  await Promise.all([loadIterations(), loadMetrics()]);
  if (hash) {
    for (const [id, key] of [["#f-iteration", "iteration"], ["#f-category", "category"], ["#f-task", "task"],
      ["#f-min", "min_reward"], ["#f-max", "max_reward"], ["#f-success", "success"]]) {
      if (hash.has(key)) $(id).value = hash.get(key);
    }
  }
  if (!hash || !hash.has("iteration")) {
    // Start on the newest iteration: small, and what a user watching a run wants.
    const newest = state.iterations[state.iterations.length - 1];
    $("#f-iteration").value = newest ? String(newest.iteration) : "";
  }
  renderIterations();
  await loadTrajectories();
  const sel = hash && hash.get("sel");
  if (sel) {
    const [iteration, index] = sel.split(":").map(Number);
    await selectTrajectory(iteration, index);
  }
}

async function refresh() {
  if (!(await loadTrials(false))) return;
  await Promise.all([loadIterations(), loadMetrics()]);
  renderIterations();
  await loadTrajectories();
}

function debounce(fn, ms) {
  let timer;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

function wire() {
  $("#trial").addEventListener("change", async () => {
    state.trial = $("#trial").value;
    state.selected = null;
    state.extraMetrics = [];
    $("#detail").hidden = true;
    $("#detail-empty").hidden = false;
    await loadTrials(false);
    await loadTrial(false);
  });
  const reload = debounce(loadTrajectories, 250);
  for (const input of document.querySelectorAll("#filters input")) input.addEventListener("input", reload);
  for (const select of document.querySelectorAll("#filters select")) {
    select.addEventListener("change", () => {
      renderIterations();
      loadTrajectories();
    });
  }
  $("#filters").addEventListener("submit", (evt) => evt.preventDefault());
  $("#f-clear").addEventListener("click", () => {
    for (const input of document.querySelectorAll("#filters input")) input.value = "";
    $("#f-category").value = "";
    $("#f-success").value = "";
    loadTrajectories();
  });
  for (const th of document.querySelectorAll("#trajectories th")) {
    th.addEventListener("click", () => {
      state.sortDir = state.sortKey === th.dataset.key ? -state.sortDir : th.dataset.key === "reward" ? -1 : 1;
      state.sortKey = th.dataset.key;
      renderRows();
    });
  }
  $("#extra-metric").addEventListener("change", () => {
    const key = $("#extra-metric").value;
    if (key && !state.extraMetrics.includes(key)) state.extraMetrics.push(key);
    $("#extra-metric").value = "";
    renderCurves();
  });
  $("#refresh").addEventListener("click", refresh);
  $("#auto-refresh").addEventListener("change", () => {
    clearInterval(state.timer);
    state.timer = $("#auto-refresh").checked ? setInterval(refresh, 5000) : null;
  });
  window.addEventListener("resize", debounce(renderCurves, 150));
}

async function main() {
  wire();
  try {
    if (await loadTrials(true)) await loadTrial(true);
  } catch (err) {
    $("#trial-info").textContent = `error: ${err.message}`;
  }
  document.body.dataset.ready = "1";
}

main();
