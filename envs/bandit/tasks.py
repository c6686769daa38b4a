"""Task ids of the bandit: 200 prompts, every 5th in the test split."""

NUM_TASKS = 200


def num_tasks() -> int:
    return NUM_TASKS


def split_ids(split: str) -> list[int]:
    if split == "train":
        return [i for i in range(NUM_TASKS) if i % 5]
    if split == "test":
        return [i for i in range(NUM_TASKS) if i % 5 == 0]
    raise KeyError(split)


def category(data_idx: int) -> str:
    return "bandit"
