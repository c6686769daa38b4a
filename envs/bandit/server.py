from envs.bandit.env import BanditEnv
from envs.bandit.tasks import split_ids
from envs.common.server import create_app as _create_app


def create_app():
    return _create_app("bandit", BanditEnv, split_ids=split_ids)
