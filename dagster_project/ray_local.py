"""A Ray cluster on this machine's loopback interface: a head node and worker nodes, all at 127.0.0.1.

    python -m dagster_project.ray_local head   --port 6379 --dashboard-port 8265 --num-cpus 1
    python -m dagster_project.ray_local worker --address 127.0.0.1:6379 --num-cpus 1

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

LOOPBACK = "127.0.0.1"


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
    process = subprocess.Popen(command, env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})

    def stop(*_):
        process.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return process.wait()


def worker(arguments) -> int:
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # keep 127.0.0.1 as this node's address
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
