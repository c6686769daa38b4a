"""The env-server benchmark runs end to end (tiny counts) and writes the JSON shape run_all reads."""

from __future__ import annotations

import json

from benchmarks.env_servers import main


def test_env_server_benchmark_textcraft_json_shape(tmp_path):
    out = tmp_path / "env_servers.json"
    main(["--families", "textcraft", "--sessions", "1,2", "--steps", "9", "--tasks", "2", "--out", str(out)])
    result = json.loads(out.read_text())

    assert result["benchmark"] == "env_servers"
    assert result["meta"]["machine"]["cpu_count"] >= 1
    assert {"ray", "torch", "transformers"} <= set(result["meta"]["versions"])
    assert "env_servers" in result["meta"]["command"]
    family = result["families"]["textcraft"]
    assert "skipped" not in family
    assert len(family["scripts"]) == 2 and all(s["steps"] >= 1 for s in family["scripts"])
    for mode in ("inprocess", "http"):
        assert sorted(family[mode]) == ["1", "2"]
        for sessions, row in family[mode].items():
            assert row["sessions"] == int(sessions)
            assert row["steps"] >= 9
            assert row["steps_per_s"] > 0
            assert 0 < row["step_p50_ms"] <= row["step_p99_ms"]
    assert set(family["http_overhead_p50_ms"]) == {"1", "2"}
    assert isinstance(family["target_met"], bool)
