"""A Ray cluster on this machine's loopback interface: a head node and worker nodes, all at 127.0.0.1.

    python -m resdyn.dagster_project.launch.ray_local head   --port 6379 --dashboard-port 8265 --num-cpus 1
    python -m resdyn.dagster_project.launch.ray_local worker --address 127.0.0.1:6379 --num-cpus 1

Each command blocks until SIGTERM / Ctrl-C, then stops the Ray processes it started (and only
those: unlike ``ray stop``, which ends every Ray process on the machine).

Why not ``ray start`` for the worker: Ray maps a loopback ``--node-ip-address`` to the machine's
routable address unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, and with that setting ``ray
start`` refuses to add a worker node. The head is ``ray start --head --block`` itself; a worker is
started with the same Ray API that ``ray start`` calls (``ray._private.node.Node``), given 127.0.0.1.
For a real cluster use ``ray start`` (or KubeRay) as Ray documents: see the README.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from resdyn.dagster_project.configuration.config import child_environment, set_for_this_process
from resdyn.dagster_project.configuration.ports import LOOPBACK, free_ports

LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # Ray keeps 127.0.0.1 as a node's address


def head(arguments) -> int:
    command = ["ray", "start", "--head", "--block", "--node-ip-address", LOOPBACK, "--port", str(arguments.port),
               "--num-cpus", str(arguments.num_cpus), "--dashboard-host", LOOPBACK, "--dashboard-port",
               str(arguments.dashboard_port), "--disable-usage-stats", "--include-dashboard", "true"]
    for flag in ("ray_client_server_port", "dashboard_agent_listen_port", "metrics_export_port",
                 "dashboard_agent_grpc_port", "runtime_env_agent_port", "node_manager_port", "object_manager_port"):
        value = getattr(arguments, flag)
        if value:
            command += [f"--{flag.replace('_', '-')}", str(value)]
    if arguments.num_gpus is not None:
        command += ["--num-gpus", str(arguments.num_gpus)]
    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    command[0] = ray if os.path.exists(ray) else "ray"
    process = subprocess.Popen(command, env=child_environment(LOOPBACK_ONLY))

    def stop(*_):
        process.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return process.wait()


def worker(arguments) -> int:
    set_for_this_process(LOOPBACK_ONLY)  # keep 127.0.0.1 as this node's address
    import ray._private.node
    import ray._private.parameter

    parameters = ray._private.parameter.RayParams(node_ip_address=LOOPBACK, gcs_address=arguments.address,
                                                  num_cpus=arguments.num_cpus, num_gpus=arguments.num_gpus)
    node = ray._private.node.Node(parameters, head=False, shutdown_at_exit=True, spawn_reaper=True)
    print(f"ray worker node at {LOOPBACK} joined {arguments.address}", flush=True)
    stopping = []

    def stop(*_):
        stopping.append(True)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not stopping:
        time.sleep(0.2)
    node.kill_all_processes(check_alive=False, allow_graceful=True)
    return 0


class LocalCluster:
    """``with LocalCluster(logs, workers=1) as cluster:`` a head and ``workers`` worker nodes on 127.0.0.1,
    each with ``num_cpus`` CPUs, started as background processes whose PIDs this object keeps; on exit
    exactly those are stopped (SIGTERM, then SIGKILL after 60 s). ``cluster.address`` is the dashboard
    URL for ``--ray-address``, ``cluster.gcs`` the address a worker node joins."""

    def __init__(self, logs, *, workers: int = 1, num_cpus: int = 1, environment: dict | None = None,
                 timeout: float = 120.0) -> None:
        from pathlib import Path

        self.logs, self.workers, self.num_cpus, self.timeout = Path(logs), workers, num_cpus, timeout
        self.environment = {**environment, **LOOPBACK_ONLY} if environment is not None else \
            child_environment(LOOPBACK_ONLY)
        self.processes: list[subprocess.Popen] = []
        self.address = self.gcs = self.client = ""

    def _start(self, name: str, arguments: list[str]) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-m", "resdyn.dagster_project.launch.ray_local", *arguments],
                                   env=self.environment, stdout=open(self.logs / f"{name}.log", "w"),
                                   stderr=subprocess.STDOUT)
        self.processes.append(process)
        return process

    def _fail(self, name: str, what: str):
        raise RuntimeError(f"{what}:\n" + (self.logs / f"{name}.log").read_text()[-3000:])

    def __enter__(self) -> "LocalCluster":
        import urllib.request

        self.logs.mkdir(parents=True, exist_ok=True)
        port, dashboard, *others = free_ports(7)
        flags = ("--ray-client-server-port", "--dashboard-agent-listen-port", "--metrics-export-port",
                 "--dashboard-agent-grpc-port", "--runtime-env-agent-port")
        try:
            head_process = self._start("head", ["head", "--port", str(port), "--dashboard-port", str(dashboard),
                                                *[v for pair in zip(flags, map(str, others)) for v in pair],
                                                "--num-cpus", str(self.num_cpus)])
            self.address, self.gcs = f"http://{LOOPBACK}:{dashboard}", f"{LOOPBACK}:{port}"
            self.client = f"ray://{LOOPBACK}:{others[0]}"
            deadline = time.time() + self.timeout
            while True:
                try:
                    urllib.request.urlopen(f"{self.address}/api/version", timeout=2).read()
                    break
                except OSError:
                    if time.time() > deadline or head_process.poll() is not None:
                        self._fail("head", "the Ray head did not start")
                    time.sleep(1)
            for index in range(self.workers):
                self._start(f"worker{index}", ["worker", "--address", self.gcs, "--num-cpus", str(self.num_cpus)])
            deadline = time.time() + self.timeout
            while len([n for n in self.nodes() if n["alive"]]) < 1 + self.workers:
                if time.time() > deadline or any(p.poll() is not None for p in self.processes):
                    self._fail("worker0", "a Ray worker node did not join")
                time.sleep(2)
        except BaseException:
            self.stop()
            raise
        return self

    def nodes(self) -> list[dict]:
        """[{address, alive}] of every node, asked from a separate process (this one stays Ray-free)."""
        import json

        script = ("import json, ray; ray.init(address=%r, logging_level='ERROR');"
                  "print(json.dumps([{'address': n['NodeManagerAddress'], 'alive': n['Alive']} for n in ray.nodes()]))"
                  % self.gcs)
        output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                                env=self.environment)
        return json.loads(output.stdout.strip().splitlines()[-1]) if output.returncode == 0 else []

    def stop(self) -> None:
        for process in reversed(self.processes):  # the PIDs this object started, nothing else
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()

    def __exit__(self, *_) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    head_parser = commands.add_parser("head")
    head_parser.add_argument("--port", type=int, default=6379)
    head_parser.add_argument("--dashboard-port", type=int, default=8265)
    for flag in ("ray-client-server-port", "dashboard-agent-listen-port", "metrics-export-port",
                 "dashboard-agent-grpc-port", "runtime-env-agent-port", "node-manager-port", "object-manager-port"):
        head_parser.add_argument(f"--{flag}", type=int, default=0)
    head_parser.add_argument("--num-cpus", type=int, default=1)
    head_parser.add_argument("--num-gpus", type=int, default=None)
    head_parser.set_defaults(handler=head)
    worker_parser = commands.add_parser("worker")
    worker_parser.add_argument("--address", required=True, help="the head's GCS address, 127.0.0.1:PORT")
    worker_parser.add_argument("--num-cpus", type=int, default=1)
    worker_parser.add_argument("--num-gpus", type=int, default=None)
    worker_parser.set_defaults(handler=worker)
    arguments = parser.parse_args(argv)
    return arguments.handler(arguments)


if __name__ == "__main__":
    sys.exit(main())
