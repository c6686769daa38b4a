"""One-off: continue the shipped agent on expert + recovery data; export; (eval separately)."""
import sys, time, json, os, tempfile, dataclasses
from pathlib import Path
import ray
from rllib_agentgym.agent_model import AgentRecipe, write_expert_data, sft_config, agent_model_path
from rllib_agentgym.data.conversations import write_jsonl
from rllib_agentgym.data.recovery import recovery_conversations
from rllib_agentgym.run_logs import read_jsonl
from rllib_agentgym.export import export_checkpoint

out = Path(sys.argv[1]); iters = int(sys.argv[2]); sources = [x.split("=") for x in sys.argv[3].split(",") if "=" in x]; lr = float(sys.argv[4])
recipe = dataclasses.replace(AgentRecipe(), iterations=iters, lr=lr, lr_warmup_iterations=10)
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
tmp = Path(tempfile.mkdtemp(prefix="ft-"))
data = write_expert_data(recipe, tmp)
for env, path in sources:
    rows = recovery_conversations(env, read_jsonl(path), max_steps=15)
    f = tmp / f"recovery-{env.split('/')[-1]}.jsonl"
    n = write_jsonl(f, rows); print("recovery", env, n, flush=True)
    data.append(str(f))
algo = sft_config(recipe, data, str(agent_model_path())).build_algo()
t = time.perf_counter()
for i in range(iters):
    r = algo.train()
    if (i + 1) % 50 == 0:
        print(i + 1, r["learners"]["default_policy"]["sft_loss"], f"{time.perf_counter()-t:.0f}s", flush=True)
ckpt = algo.save(str(tmp / "ckpt")).checkpoint.path
algo.stop(); ray.shutdown()
export_checkpoint(ckpt, out)
print("done", out)
