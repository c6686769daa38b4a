"""Run every benchmark, print one table (Markdown) and write the JSON.

    python benchmarks/run_all.py                       # all, default sizes (~15-25 min on 2 busy cores,
                                                       # + ~25 min for searchqa_retrieval / searchqa_dense at load ~12)
    python benchmarks/run_all.py --quick               # smaller counts, a few minutes, into a temp dir
    python benchmarks/run_all.py --only rollout,learner --out-dir /tmp/bench
    python benchmarks/run_all.py --from-results       # the table again, from the JSON files

Each benchmark runs in its own process (its own vLLM engine / Ray cluster)
and writes `<out-dir>/<name>.json`; this script then writes
`<out-dir>/run_all.json` (every result plus the table rows) and
`<out-dir>/table.md`. A benchmark that fails is reported in the table with
its error; the others still run.

Where results go: a run at default sizes writes `benchmarks/results/latest/`,
which is kept in git (each JSON carries its `meta`: machine, versions, exact
command), so the latest measured numbers travel with the code; each such run
overwrites the files of the benchmarks it ran, and its table and
`run_all.json` also list the results of the other benchmarks already there
(each with its own meta). `--quick` runs are smoke runs: unless `--out-dir`
says otherwise they go to a new temp dir, never to `latest/`. Tests never
call this script.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/run_all.py`

from benchmarks.common import ROOT, meta  # noqa: E402

HERE = Path(__file__).resolve().parent
LATEST = HERE / "results" / "latest"  # kept in git: the latest full-size results

# name -> (script, default arguments, --quick arguments)
BENCHMARKS: dict[str, tuple[str, list[str], list[str]]] = {
    "rollout": ("rollout.py", [], ["--tasks", "2", "--max-turns", "3", "--repeats", "3"]),
    "learner": ("learner.py", [], ["--tasks", "2", "--group-size", "6", "--repeats", "2"]),
    "env_servers": ("env_servers.py", [], ["--steps", "100", "--tasks", "2"]),
    "weight_sync": ("weight_sync.py", [], ["--repeats", "3"]),
    "weight_sync_25m": ("weight_sync.py", ["--model", "embedded-25m"], ["--model", "embedded-25m", "--repeats", "3"]),
    "scaling": ("scaling.py", [], ["--tasks", "2", "--repeats", "2"]),
    "searchqa_retrieval": ("searchqa_retrieval.py", [], ["--scale", "1", "--max-queries", "256"]),
    # Dense retrieval's cost with a random-init encoder of e5-small-v2's shape (no weights to download).
    "searchqa_dense": ("searchqa_retrieval.py", ["--random-encoder", "12x384", "--skip-bm25", "--scale", "1", "--max-queries", "512"],
                       ["--random-encoder", "2x128", "--skip-bm25", "--scale", "0.3", "--max-queries", "128"]),
    "precision": ("precision.py", ["--generation"], ["--batch", "2", "--seq-len", "128", "--repeats", "2", "--generation",
                                                     "--gen-prompts", "4", "--gen-prompt-tokens", "64", "--gen-tokens", "8"]),
    # Exits 1 after writing its JSON when a process grew too much: its row shows that verdict.
    "soak": ("soak.py", [], ["--iterations", "12", "--warmup", "4", "--window", "2"]),
    "kv_cache": ("kv_cache.py", [], ["--episodes", "8", "--turns", "3", "--first-prompt-tokens", "256"]),
}


def _fmt(x: Any, digits: int = 3) -> str:
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1000 else f"{x:,.0f}"
    return str(x)


Row = tuple[str, str, str, str, str, str]  # benchmark, what, framework, limit, ratio, target


def _judged(r: dict, m: dict) -> str:
    """Target check on the CPU-time ratio on a CPU machine (load-proof), on the wall ratio with a GPU."""
    on_gpu = r["meta"]["machine"].get("gpu_model") is not None
    value, kind = (m["ratio"], "wall") if on_gpu else (m["ratio_cpu_time"], "CPU")
    return f">= {r['target_ratio']} ({kind}): {_fmt(value >= r['target_ratio'])}"


def _rollout_rows(r: dict) -> list[Row]:
    rows = []
    for mode, m in r["modes"].items():
        rows.append(("rollout", f"LLMEnvRunner tokens/s, TextCraft {mode}", _fmt(m["runner_tokens_per_s"]),
                     f"{_fmt(m['raw_tokens_per_s'])} (raw vLLM)",
                     f"{_fmt(m['ratio'])} wall / {_fmt(m['ratio_cpu_time'])} CPU", _judged(r, m)))
        rows.append(("rollout", f"share of runner wall in env / bookkeeping ({mode})",
                     f"{m['runner_share_env']:.1%} / {m['runner_share_other']:.1%}", "", "", ""))
    return rows


_LEARNER_MODES = {"no_kl": "(no KL: same work as bare)", "kl": "(KL to the reference)",
                  "no_kl_in_order": "(no KL, micro-batches in batch order: before sorting)",
                  "no_kl_unshared": "(no KL, every row's prompt run in full: before prefix sharing)",
                  "no_kl_skip": "(no KL, half the groups fail whole: their rows left out)"}
_LEARNER_LIMITS = {"bare": "bare f+b+step", "bare_full_lm_head": "bare f+b+step, LM head on all positions",
                   "bare_plus_ref": "bare f+b+step + ref fwd", "bare_unshared": "bare f+b+step, prompt run per row",
                   "bare_shared": "bare f+b+step, shared prefix run once",
                   "bare_signal_rows": "bare f+b+step over the rows with advantage"}


def _learner_rows(r: dict) -> list[Row]:
    """One row per (mode, limit); the target is judged on each mode's first limit (no_kl_in_order: none)."""
    rows = []
    for mode, m in r["modes"].items():
        # Results from before limits were listed per mode carry one bare limit at the top level.
        limits = m.get("limits") or {"bare": {**m, "tokens_per_s": m["bare_tokens_per_s"]}}
        judged = m.get("judged_limit", "bare")
        for name, limit in limits.items():
            target = _judged(r, m) if name == judged and mode != "no_kl_in_order" else "(for comparison)"
            rows.append(("learner", f"GRPO update tokens/s {_LEARNER_MODES.get(mode, mode)}", _fmt(m["grpo_tokens_per_s"]),
                         f"{_fmt(limit['tokens_per_s'])} ({_LEARNER_LIMITS.get(name, name)})",
                         f"{_fmt(limit['ratio'])} wall / {_fmt(limit['ratio_cpu_time'])} CPU", target))
    b = r["batch"]
    rows.append(("learner", f"padding waste, micro-batches of {r['settings']['micro_batch_size']} "
                 f"({b['trajectories']} traj, {b['min_len']}-{b['max_len']} tok)",
                 f"{b['padding_waste_micro_by_length']:.1%} (by length)", f"{b['padding_waste_micro_in_order']:.1%} (in order)",
                 "", ""))
    return rows


def _env_rows(r: dict) -> list[Row]:
    rows = []
    target = r["target_http_overhead_p50_ms"]
    for family, f in r["families"].items():
        if "skipped" in f:
            rows.append(("env_servers", f"{family}: skipped", f["skipped"][:80], "", "", ""))
            continue
        for n in f["http"]:
            h, i = f["http"][n], f["inprocess"][n]
            # What HTTP adds: the transport (round trip - the server's Server-Timing), and the p50 difference.
            transport = h.get("transport_p50_ms")
            added = (f"transport {transport:.2f}/{h['transport_p99_ms']:.2f} ms p50/p99; " if transport is not None else "")
            judged = transport if transport is not None else f["http_overhead_p50_ms"][n]
            rows.append(("env_servers", f"{family}, {n} session(s): HTTP p50/p99 ms, steps/s",
                         f"{h['step_p50_ms']:.2f}/{h['step_p99_ms']:.2f}, {_fmt(h['steps_per_s'])}",
                         f"{i['step_p50_ms']:.3f}/{i['step_p99_ms']:.3f}, {_fmt(i['steps_per_s'])} (in-process)",
                         f"{added}{f['http_overhead_p50_ms'][n]:+.2f} ms p50 difference",
                         f"< {target} ms ({'transport' if transport is not None else 'difference'}): {_fmt(judged < target)}"
                         if n == min(f["http"], key=int) else ""))
        if f.get("note"):
            rows.append(("env_servers", f"{family}: note", f["note"], "", "", ""))
    return rows


def _weight_rows(r: dict) -> list[Row]:
    size = f"{r['model_bytes'] / 2**20:.0f} MiB"
    return [("weight_sync", f"set_weights into vLLM, {size} ({r['num_tensors']} tensors)", f"{r['set_weights_s'] * 1e3:.1f} ms",
             f"{r['limit_s'] * 1e3:.2f} ms ({r['copy']['bytes_per_s'] / 1e9:.1f} GB/s {r['copy']['direction']})",
             f"{_fmt(r['efficiency'])}", "")]


def _scaling_rows(r: dict) -> list[Row]:
    rows = []
    for kind in ("strong", "weak"):
        if kind not in r:
            continue
        for n, m in r[kind].items():
            rows.append(("scaling", f"{kind}: {n} runner(s) tokens/s (tokens per CPU s)",
                         f"{_fmt(m['tokens_per_s'])} ({_fmt(m['tokens_per_cpu_s'])})", f"ideal x{m['ideal_speedup']}",
                         f"x{_fmt(m['speedup'])}", ""))
    return rows


def _retrieval_rows(r: dict) -> list[Row]:
    """Index build docs/s, in-process search queries/s by batch size, and the HTTP service
    against the same-batch in-process rate (its limit)."""
    rows = []
    for key, label in (("bm25_numpy", "BM25 (bm25s numpy)"), ("bm25_numba", "BM25 (bm25s numba)"), ("dense", "dense")):
        if key not in r:
            continue
        m = r[key]
        if key == "dense":
            encoder = f"random-init BERT {r['random_encoder']}, " if r.get("random_encoder") else ""
            label = f"dense ({encoder}{m['search_backend']})"
        if key == "bm25_numba":  # the same index as numpy's; its build time is numba's JIT compile
            rows.append(("searchqa_retrieval", f"{label}: index build + JIT compile, {r['num_docs']:,} docs: s",
                         f"{m['build_s']:.1f} s", f"load {m['load_s']:.3f} s (mmap)", "", ""))
        else:
            rows.append(("searchqa_retrieval", f"{label}: index build, {r['num_docs']:,} docs: docs/s",
                         _fmt(m["build_docs_per_s"]), f"load {m['load_s']:.3f} s (mmap)", "", ""))
        rates = m["queries_per_s"]
        rows.append(("searchqa_retrieval", f"{label}: in-process queries/s, batch " + " / ".join(k.split("_")[1] for k in rates),
                     " / ".join(_fmt(v) for v in rates.values()), "", "", ""))
        service = m["service_queries_per_s"]
        single = next(k for k in service if k.endswith("single_query"))
        clients = single.split("_")[1]
        inproc = rates.get("batch_64")
        rows.append(("searchqa_retrieval", f"{label}: HTTP service queries/s, batches of 64 / {clients} one-query clients",
                     f"{_fmt(service['http_batch_64'])} / {_fmt(service[single])}",
                     f"{_fmt(inproc)} (in-process, batch 64)" if inproc else "",
                     _fmt(service["http_batch_64"] / inproc) if inproc else "", ""))
        if "index_only_queries_per_s" in m:
            rows.append(("searchqa_retrieval", f"{label}: index alone (queries pre-encoded) queries/s, "
                         + " / ".join(m["index_only_queries_per_s"]),
                         " / ".join(_fmt(v) for v in m["index_only_queries_per_s"].values()), "", "", ""))
    return rows


def _precision_rows(r: dict) -> list[Row]:
    """The learner's training step (and with --generation the engine's generation) in the
    precision the framework picks here, against the other."""
    s = r["settings"]
    native = {True: "native bf16", False: "no bf16 units", None: s["device"]}[r["cpu_native_bfloat16"]]

    def row(what: str, rates: dict, picked: str, ok: bool) -> Row:
        other = next(name for name in rates if name != picked)
        return ("precision", f"{what} ({native}): picked {picked}", _fmt(rates[picked]),
                f"{_fmt(rates[other])} ({other})", _fmt(rates[picked] / rates[other]), f"picked not slower: {_fmt(ok)}")

    rows = [row(f"train step tokens/s, {s['batch']} x {s['seq_len']}", r["tokens_per_s"], r["picked"],
                r["picked_is_not_slower"])]
    if r.get("generation"):
        g = r["generation"]
        rows.append(row(f"vLLM generated tokens/s, {s['gen_prompts']} x ({s['gen_prompt_tokens']} + {s['gen_tokens']})",
                        g["tokens_per_s"], g["picked"], g["picked_is_not_slower"]))
    return rows


def _soak_rows(r: dict) -> list[Row]:
    """Resident memory growth after warm-up, per process (driver, env runners, env servers)."""
    s = r["settings"]
    rows = []
    for process, pct in r["growth_after_warmup_pct"].items():
        rows.append(("soak", f"RSS growth of {process}, iterations {s['warmup'] + 1}-{s['iterations']} ({s['engine']})",
                     f"{pct:+.2f}%", f"{_fmt(r['rss_mb_first'].get(process))} -> {_fmt(r['rss_mb_last'].get(process))} MB",
                     f"second half {r['growth_second_half_pct'][process]:+.2f}%",
                     f"< {_fmt(s['max_growth'])}%: {_fmt(pct < s['max_growth'])}"))
    return rows


def _kv_cache_rows(r: dict) -> list[Row]:
    """The multi-turn workload's wall time with the CPU KV cache sized for its episodes against 1 GiB."""
    s, sized, fixed = r["settings"], r["sizes"]["sized"], r["sizes"]["fixed_1gib"]
    work = f"{s['episodes']} episodes x {s['turns']} turns, {sized['final_context_tokens']} tokens at the end"
    return [("kv_cache", f"multi-turn generation, {work}: s (prefilled tokens)",
             f"{sized['wall_s']:.1f} s ({sized['prefilled_tokens']:,}), {_fmt(sized['kv_cache_gib'])} GiB sized",
             f"{fixed['wall_s']:.1f} s ({fixed['prefilled_tokens']:,}), 1 GiB",
             f"x{_fmt(r['speedup'])} faster, x{_fmt(r['prefill_ratio'])} less prefill", "(reported)")]


ROWS: dict[str, Callable[[dict], list[Row]]] = {
    "rollout": _rollout_rows,
    "learner": _learner_rows,
    "env_servers": _env_rows,
    "weight_sync": _weight_rows,
    "weight_sync_25m": _weight_rows,
    "scaling": _scaling_rows,
    "searchqa_retrieval": _retrieval_rows,
    "searchqa_dense": _retrieval_rows,
    "precision": _precision_rows,
    "soak": _soak_rows,
    "kv_cache": _kv_cache_rows,
}


def table(rows: Sequence[Row]) -> str:
    head = ("benchmark", "measure", "this framework", "limit (same run)", "ratio", "target")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def default_out_dir(quick: bool) -> Path:
    """`results/latest/` for measurements at default sizes; a new temp dir for --quick smoke runs."""
    return Path(tempfile.mkdtemp(prefix="bench-quick-")) if quick else LATEST


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated subset of: " + ", ".join(BENCHMARKS))
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--out-dir", default=None,
                        help=f"default: {LATEST.relative_to(ROOT)} (kept in git); with --quick a new temp dir")
    parser.add_argument("--from-results", action="store_true", help="rebuild the table from the JSON already in --out-dir")
    args = parser.parse_args(argv)
    selected = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in selected if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}: choose from {', '.join(BENCHMARKS)}")
    out_dir = Path(args.out_dir) if args.out_dir else (LATEST if args.from_results else default_out_dir(args.quick))
    out_dir.mkdir(parents=True, exist_ok=True)

    results: dict[str, Any] = {}
    for name in selected:
        script, default_args, quick_args = BENCHMARKS[name]
        out = out_dir / f"{name}.json"
        if args.from_results:
            if out.exists():
                results[name] = json.loads(out.read_text())
            continue
        cmd = [sys.executable, str(HERE / script), *(quick_args if args.quick else default_args), "--out", str(out)]
        out.unlink(missing_ok=True)  # a result left by an earlier run must not pass for this one's
        print(f"== {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        elapsed = time.perf_counter() - t0
        if not out.exists():  # it failed before writing its result
            error = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            results[name] = {"error": error, "returncode": proc.returncode}
            print(f"   failed after {elapsed:.0f} s: {error}", file=sys.stderr)
            continue
        results[name] = json.loads(out.read_text())
        print(f"   done in {elapsed:.0f} s", file=sys.stderr)

    # The other benchmarks' results already in the folder (an earlier run's) join the table.
    kept = [] if args.from_results else [n for n in BENCHMARKS if n not in results and (out_dir / f"{n}.json").exists()]
    for name in kept:
        results[name] = json.loads((out_dir / f"{name}.json").read_text())
    results = {name: results[name] for name in BENCHMARKS if name in results}
    rows: list[Row] = []
    for name, result in results.items():
        if "error" in result:
            rows.append((name, "FAILED", result["error"][:120], "", "", ""))
        else:
            rows.extend(ROWS[name](result))

    text = table(rows)
    print(text)
    (out_dir / "table.md").write_text(text + "\n")
    keys = ("benchmark", "measure", "framework", "limit", "ratio", "target")
    summary = {"meta": meta(__file__, argv), "ran": [] if args.from_results else selected,
               "kept_from_earlier_runs": kept, "table": [dict(zip(keys, r)) for r in rows], "results": results}
    (out_dir / "run_all.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")
    print(f"\nJSON: {out_dir / 'run_all.json'}", file=sys.stderr)
    ran = [results[n] for n in selected if n in results]
    return 0 if all("error" not in r and r.get("passed", True) for r in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
