"""Imported first by the multiprocess executor's fork server (executors.STEP_PRELOAD): when a process here owns the
run (resdyn/lifeline.py), the fork server and every step forked from it end with their parent."""

from resdyn.lifeline import arm_fork_server

arm_fork_server()
