"""The vLLM engine's CPU KV cache is sized for the episodes a runner plays at once."""

from __future__ import annotations

from transformers import Qwen2Config

from rllib_agentgym.env_runners.engines import GIB, VLLMEngine, cpu_kv_cache_bytes, kv_cache_bytes_per_token

# SmolLM2-135M's attention: 30 layers, 9 query heads over 3 KV heads of 64 dims.
SMOLLM2_135M = Qwen2Config(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3)


def test_bytes_per_token_count_the_kv_heads_not_the_query_heads():
    assert kv_cache_bytes_per_token(SMOLLM2_135M, dtype_bytes=4) == 2 * 30 * 3 * 64 * 4
    no_gqa = Qwen2Config(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=None)
    assert kv_cache_bytes_per_token(no_gqa, dtype_bytes=2) == 2 * 4 * 4 * 64 * 2


def test_cache_holds_every_concurrent_context_within_a_share_of_memory():
    per_token = kv_cache_bytes_per_token(SMOLLM2_135M, dtype_bytes=4)  # 45 KiB
    # 32 SciWorld episodes of up to 4096 tokens need 5.6 GiB: rounded up to 6.
    assert cpu_kv_cache_bytes(per_token, 4096, 32, available_bytes=64 * GIB) == 6 * GIB
    # At most a quarter of what is available (16 GiB free: 4).
    assert cpu_kv_cache_bytes(per_token, 4096, 32, available_bytes=16 * GIB) == 4 * GIB
    # A small need, or little memory, still gets vLLM's former default of 1 GiB.
    assert cpu_kv_cache_bytes(per_token, 512, 4, available_bytes=64 * GIB) == GIB
    assert cpu_kv_cache_bytes(per_token, 4096, 32, available_bytes=2 * GIB) == GIB


def test_engine_passes_the_size_to_vllm(embedded_model):
    engine = VLLMEngine(embedded_model, dtype="float32", max_model_len=512, seed=0, kv_cache_space_gb=2)
    try:
        assert engine.llm.llm_engine.vllm_config.cache_config.kv_cache_memory_bytes == 2 * GIB
    finally:
        engine.shutdown()
    # Sized from the model: the embedded model's 512-token contexts fit in the 1 GiB floor.
    assert VLLMEngine._sized_kv_cache(embedded_model, "float32", 512, 32) == GIB


def test_runners_size_the_cache_for_the_episodes_they_play_at_once(monkeypatch):
    """A training runner asks for group_size x tasks_per_iteration contexts; `rllib evaluate`
    for its batch of episodes (engine_options it was given are kept)."""
    from rllib_agentgym.env_runners import llm_env_runner
    from rllib_agentgym.evaluation import build_runner, load_policy

    asked = []
    real_make_engine = llm_env_runner.make_engine
    monkeypatch.setattr(llm_env_runner, "make_engine",
                        lambda kind, path, **options: asked.append(options) or real_make_engine(kind, path, **options))
    policy = load_policy("embedded")
    policy.algo_config = {"engine_options": {"kv_cache_space_gb": 3}}
    for concurrent_episodes in (None, 12):
        runner = build_runner(policy, env="agentgym/textcraft", split="test", temperature=0.0, max_turns=1,
                              engine="hf", env_config=None, seed=0, concurrent_episodes=concurrent_episodes)
        try:
            runner._ensure_engine()
        finally:
            runner.stop()
        cfg = runner.config
        assert asked[-1]["concurrent_sequences"] == (concurrent_episodes or cfg.group_size * cfg.tasks_per_iteration)
        assert asked[-1]["kv_cache_space_gb"] == 3
    assert [options["concurrent_sequences"] for options in asked] == [32, 12]  # GRPO's 8 x 4, then the batch


def test_a_runner_that_evaluates_sizes_the_cache_for_the_evaluation_too():
    """Evaluation on the training runners plays every evaluation task at once: TextCraft's 95
    depth-1 and depth-2 test tasks against a training batch of 8 x 4."""
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
    from rllib_agentgym.env_runners.llm_env_runner import concurrent_episodes

    def config(**evaluation):
        return (GRPOConfig().environment("agentgym/textcraft", env_config={"split": "train"})
                .training(group_size=8, tasks_per_iteration=4)
                .evaluation(evaluation_config={"env_config": {"split": "test", "categories": ["depth 1", "depth 2"]}},
                            **evaluation))

    assert concurrent_episodes(config()) == 32  # no evaluation: the training batch
    assert concurrent_episodes(config(), evaluates=True) == 95  # a caller that evaluates on it (learning_curves)
    assert concurrent_episodes(config(evaluation_interval=5)) == 95
    assert concurrent_episodes(config(evaluation_interval=5).env_runners(num_env_runners=2)) == 48  # its share
    assert concurrent_episodes(config(evaluation_interval=5, evaluation_num_tasks=10)) == 32
    # Separate evaluation runners play the evaluation: the training runners keep the batch's size.
    assert concurrent_episodes(config(evaluation_interval=5, evaluation_num_env_runners=1)) == 32
