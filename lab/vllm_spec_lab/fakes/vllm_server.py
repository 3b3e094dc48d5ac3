"""`python -m vllm.entrypoints.openai.api_server ...` as the fake vLLM venv runs it (see
fakes/vllm_cache.py): a SIMULATED vLLM, a real process tree.

- an "engine core" child process in the same process group (not watching its parent: only a
  group-wide kill or the warden can end it once this server is gone);
- GET /health, GET /metrics (fakes.vllm.FakeVllm's registry), POST /v1/completions, which steps the
  counters as the real tiny model's n-gram drafts go (vllm_spec_lab/traffic.py): temperature 0
  -> acceptance 0.875, or 0.45 for the partly looping prompts (the demo's warning band, between the
  alerts' 0.4 and 0.5 thresholds), anything else -> 0.0.
Environment: FAKE_VLLM_FAIL_AT_START=1 makes it exit 1 after starting its engine child (a start-up
crash).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from wsgiref.simple_server import make_server

from vllm_spec_lab.fakes.vllm import FakeVllm
from vllm_spec_lab.httpd import QuietWSGIHandler, ThreadingWSGIServer
from vllm_spec_lab.traffic import PARTIAL_LOOP_PROMPTS

ENGINE_CORE = "import time\nwhile True:\n    time.sleep(60)\n"


def acceptance(request: dict) -> float:
    """What the real tiny model's n-gram drafts give for this request (traffic.py's measurements)."""
    if float(request.get("temperature", 0)) != 0:
        return 0.0
    return 0.45 if request.get("prompt") in PARTIAL_LOOP_PROMPTS else 0.875


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", dest="module")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default="tiny-llama")
    args, _unknown = parser.parse_known_args()
    engine = subprocess.Popen([sys.executable, "-c", ENGINE_CORE])
    print(f"fake vLLM api server pid {os.getpid()}, engine core pid {engine.pid}", flush=True)
    if os.environ.get("FAKE_VLLM_FAIL_AT_START") == "1":
        print("simulated start-up crash", flush=True)
        return 1
    fake = FakeVllm(models=(args.served_model_name,), k=4)

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/health":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b""]
        if path == "/v1/completions":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            request = json.loads(environ["wsgi.input"].read(length) or b"{}")
            tokens = int(request.get("max_tokens", 16))
            time.sleep(0.2)
            fake.step(max(1, tokens // 4), acceptance(request))
            body = json.dumps({"choices": [{"text": "x" * tokens}],
                               "usage": {"completion_tokens": tokens}}).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        return fake._app(environ, start_response)

    server = make_server(args.host, args.port, app, ThreadingWSGIServer, handler_class=QuietWSGIHandler)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
