"""Asking a Dagster webserver (or `resdyn ui` in front of one) over GraphQL, for the tests that launch runs."""

from __future__ import annotations

import json
import time
import urllib.request

LAUNCH = """
    mutation($executionParams: ExecutionParams!) {
      launchRun(executionParams: $executionParams) {
        __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
        ... on RunConfigValidationInvalid { errors { message } }
      }
    }"""


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    """The answer's data; an answer with errors fails the test, naming them."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        body = json.loads(response.read())
    assert "errors" not in body, body
    return body["data"]


def wait_for_run(port: int, run_id: str, timeout: float = 300) -> str | None:
    """The run's status once it has ended (or the last seen, after ``timeout`` seconds)."""
    status = None
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = graphql(port, "query($runId: ID!) { runOrError(runId: $runId) { ... on Run { status } } }",
                         {"runId": run_id})["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(2)
    return status
