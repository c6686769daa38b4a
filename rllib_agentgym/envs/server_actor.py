"""Env servers launched by env runners (`launch_server: true`), as named Ray actors.

Inside a Ray cluster (the runner is itself a Ray actor: a remote env runner, or the
Algorithm of a Tune trial holding the local one) each launched server is owned by an
`EnvServer` actor named `agentgym-env-server/<env>/<runner index>/<n>-<owner>`, so the
dashboard lists it beside the runner that started it. The actor runs the family's
server (`python -m envs.<family> --port 0`, a `LocalEnvServer`) and supervises it:
it reports url, pid and health, and restarts the server on the same port when it
dies, so the runner's sessions come back (the client recreates and replays them).

Lifetime: the actor is a normal (non-detached) actor, so Ray ends it when its owner,
the runner's process, dies; the server subprocess gets SIGTERM when the actor's
process dies (`LocalEnvServer`'s parent-death signal); `stop()` ends both.

Outside Ray (a runner in a plain driver process, e.g. `rllib evaluate`) the runner
starts the `LocalEnvServer` subprocess itself, as before.
"""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from rllib_agentgym.envs.client import LocalEnvServer, tls_context

ACTOR_NAME_PREFIX = "agentgym-env-server"
_launch_counter = itertools.count()  # per process: tells apart the servers one process launches


def env_server_actor_name(family: str, runner_index: int | None, number: int, owner: str) -> str:
    """`agentgym-env-server/<env>/<runner index>/<n>-<owner>`; `owner` (a short id of the
    launching process) keeps names unique across trials and runner groups of one job."""
    return f"{ACTOR_NAME_PREFIX}/{family}/{int(runner_index or 0)}/{number}-{owner}"


class EnvServer:
    """Owns one env server subprocess: starts it, restarts it (same port) when it exits
    unasked, reports on it, stops it. Plain Python; `launch_env_server` runs it as a Ray actor.
    """

    def __init__(self, module: str, supervise_interval_s: float = 0.5, startup_timeout_s: float = 120.0):
        self.module = module
        self._startup_timeout_s = startup_timeout_s
        # Every launch happens on this one long-lived thread: the server's parent-death
        # signal fires when the thread that started it exits, so that thread must live
        # exactly as long as this object's process.
        self._launcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="env-server-launcher")
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._restarts = 0
        self._server = self._launch(port=0)
        self.url = self._server.url
        self._supervisor = threading.Thread(target=self._supervise, args=(supervise_interval_s,), daemon=True,
                                            name="env-server-supervisor")
        self._supervisor.start()

    def _launch(self, port: int) -> LocalEnvServer:
        return self._launcher.submit(LocalEnvServer, self.module, self._startup_timeout_s, port).result()

    def _supervise(self, interval_s: float) -> None:
        while not self._stopped.wait(interval_s):
            with self._lock:
                if self._stopped.is_set() or self._server.alive():
                    continue
                try:
                    self._server = self._launch(port=self._server.port)
                    self._restarts += 1
                except Exception:  # the port may be briefly taken; try again next round
                    time.sleep(interval_s)

    def status(self) -> dict[str, Any]:
        """url, pid, alive, restarts, and the server's own /health answer (None when down)."""
        with self._lock:
            server = self._server
            alive = server.alive() and not self._stopped.is_set()
        health = None
        if alive:
            try:
                health = httpx.get(server.url + "/health", timeout=2.0, verify=tls_context()).json()
            except (httpx.HTTPError, ValueError):
                health = None
        return {"module": self.module, "url": server.url, "pid": server.pid, "alive": alive,
                "restarts": self._restarts, "health": health}

    def kill_server(self) -> int:
        """SIGKILL the server, as a crash would (fault injection); the supervisor restarts it.
        Returns the killed pid."""
        with self._lock:
            server = self._server
        server.kill()
        return server.pid

    def restart(self) -> dict[str, Any]:
        """Stop the server and start a fresh one on the same port."""
        with self._lock:
            self._server.stop()
            self._server = self._launch(port=self._server.port)
            self._restarts += 1
        return self.status()

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            self._server.stop()
        self._launcher.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"EnvServer({self.module} at {self.url})"


class ActorEnvServer:
    """The runner's handle on its `EnvServer` actor; the same surface as `LocalEnvServer`
    (url, port, pid, alive, kill, stop), so the runner does not care which it holds."""

    def __init__(self, module: str, name: str, startup_timeout_s: float = 120.0):
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.module, self.name = module, name
        self._stopped = False
        # Zero CPUs: it must never wait for (or take) a runner's or learner's CPU. Pinned to
        # this node: the server listens on loopback, for this runner only.
        self.actor = (
            ray.remote(EnvServer)
            .options(name=name, num_cpus=0, max_restarts=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                ray.get_runtime_context().get_node_id(), soft=False))
            .remote(module, startup_timeout_s=startup_timeout_s)
        )
        try:
            first = ray.get(self.actor.status.remote(), timeout=startup_timeout_s + 60)
        except Exception:
            ray.kill(self.actor)
            raise
        self.url = first["url"]

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def status(self) -> dict[str, Any] | None:
        """The actor's report, or None when the actor is gone."""
        import ray

        if self._stopped:
            return None
        try:
            return ray.get(self.actor.status.remote(), timeout=30)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return None

    @property
    def pid(self) -> int | None:
        status = self.status()
        return None if status is None else status["pid"]

    def alive(self) -> bool:
        status = self.status()
        return bool(status and status["alive"])

    def kill(self) -> None:
        """SIGKILL the server process (the actor then restarts it)."""
        import ray

        ray.get(self.actor.kill_server.remote(), timeout=30)

    def stop(self) -> None:
        import ray

        if self._stopped:
            return
        self._stopped = True
        try:
            ray.get(self.actor.stop.remote(), timeout=30)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass  # gone already, or hung: ray.kill below ends it (and its server with it)
        ray.kill(self.actor, no_restart=True)


def in_ray_actor() -> bool:
    """True in a Ray actor's process (a remote env runner, a Tune trial's Algorithm)."""
    try:
        import ray

        return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
    except Exception:
        return False


def launch_env_server(module: str, family: str, runner_index: int | None = None) -> LocalEnvServer | ActorEnvServer:
    """A server for one runner: a named `EnvServer` actor inside a Ray actor, else a subprocess."""
    if not in_ray_actor():
        return LocalEnvServer(module)
    import ray

    owner = ray.get_runtime_context().get_actor_id()[:8]
    return ActorEnvServer(module, env_server_actor_name(family, runner_index, next(_launch_counter), owner))
