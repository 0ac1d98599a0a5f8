"""The checks only a GPU can run: the trtllm engine on a small model, a NIXL VRAM transfer.

Everything else Tandem does has run on CPUs and simulated nodes; these two have not
(docs/gpu-deployment.md, "What has run on a GPU"). Run inside the trtllm image on a GPU
node (``scripts/gpu-check.sh`` does that), it prints one verdict line per check and a
summary:

    python -m tandem_dev.gpu_check --model /model [--mem VRAM]

Exit status: 0 every check passed, 1 one failed, 3 no GPU here (it says
"no GPU: skipped" rather than passing: a CPU run proves nothing about the GPU paths).
``--allow-no-gpu`` runs the same code on CPU (DRAM for the NIXL check, whatever
``tensorrt_llm`` is importable for the engine check), which is how the unit tests
exercise it against NIXL's CPU backend and the fake TensorRT-LLM.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NO_GPU = 3
_XFER_TIMEOUT_S = 30.0
_PROMPT = list(range(100, 164))
_MAX_TOKENS = 8
_POLL_S = 0.0005

Region = tuple[int, int, int, str]  # NIXL's (address, length, device id, meta)


@dataclass(frozen=True, slots=True)
class Verdict:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{self.name}: {'PASS' if self.ok else 'FAIL'} - {self.detail}"


def gpu_count() -> int:
    """GPUs ``nvidia-smi -L`` lists; 0 without the tool or a driver."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        return 0
    return sum(1 for line in listed.stdout.splitlines() if line.startswith("GPU "))


def nixl_transfer(mem: str, nbytes: int = 64 << 20) -> Verdict:
    """WRITE ``nbytes`` from one NIXL agent's buffer into another's over UCX and compare.

    Two agents in one process, as a prefill and a decode worker on one node: UCX picks
    cuda_ipc/NVLink for VRAM on one node, the same path TensorRT-LLM's NIXL cache
    transceiver takes. ``mem`` is NIXL's memory type, "VRAM" (torch CUDA tensors, GPU 0
    and the last GPU) or "DRAM" (numpy arrays).
    """
    try:
        return _write_and_compare(mem, nbytes)
    except Exception as exc:  # the verdict names whatever NIXL, UCX or CUDA raised
        return Verdict(f"nixl {mem}", False, f"{type(exc).__name__}: {exc}")


def _write_and_compare(mem: str, nbytes: int) -> Verdict:
    from nixl._api import nixl_agent, nixl_agent_config

    src, dst, regions, read_back = _buffers(mem, nbytes)
    config = nixl_agent_config(
        enable_prog_thread=True, enable_listen_thread=False, backends=["UCX"]
    )
    sender, receiver = nixl_agent("gpu-check-src", config), nixl_agent("gpu-check-dst", config)
    sender.register_memory([regions[0]], mem)
    receiver.register_memory([regions[1]], mem)
    peer = sender.add_remote_agent(receiver.get_agent_metadata())
    local = sender.get_xfer_descs(_descs(regions[0]), mem)
    remote = receiver.get_xfer_descs(_descs(regions[1]), mem)
    started = time.monotonic()
    handle = sender.initialize_xfer("WRITE", local, remote, peer, b"gpu-check")
    state = sender.transfer(handle)
    while state == "PROC" and time.monotonic() - started < _XFER_TIMEOUT_S:
        time.sleep(_POLL_S)
        state = sender.check_xfer_state(handle)
    elapsed = time.monotonic() - started
    sender.release_xfer_handle(handle)
    if state != "DONE":
        return Verdict(f"nixl {mem}", False, f"transfer {state} after {_XFER_TIMEOUT_S:g} s")
    if not np.array_equal(read_back(src), read_back(dst)):
        return Verdict(f"nixl {mem}", False, "the copy differs from the source")
    rate = nbytes / elapsed / 1e9 if elapsed > 0 else float("inf")
    return Verdict(
        f"nixl {mem}", True, f"{nbytes >> 20} MiB in {elapsed * 1e3:.1f} ms ({rate:.1f} GB/s)"
    )


def _buffers(mem: str, nbytes: int) -> tuple[Any, Any, tuple[Region, Region], Callable[[Any], Any]]:
    """Source (random bytes) and zeroed destination, their NIXL regions, and how to read
    one back into a numpy array."""
    pattern = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
    if mem == "DRAM":
        src, dst = pattern.copy(), np.zeros(nbytes, dtype=np.uint8)
        regions = ((src.ctypes.data, nbytes, 0, ""), (dst.ctypes.data, nbytes, 0, ""))
        return src, dst, regions, lambda array: array
    import torch  # the trtllm image's; only the VRAM check needs it

    last = torch.cuda.device_count() - 1
    src = torch.from_numpy(pattern).to("cuda:0")
    dst = torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{last}")
    regions = ((src.data_ptr(), nbytes, 0, ""), (dst.data_ptr(), nbytes, last, ""))
    return src, dst, regions, lambda tensor: tensor.cpu().numpy()


def _descs(region: Region) -> np.ndarray[Any, Any]:
    return np.array([[region[0], region[1], region[2]]], dtype=np.uint64)


def trtllm_engine(model_options: dict[str, object]) -> Verdict:
    """Tandem's trtllm adapter, a prefill and a decode instance on this node: a
    context-only request, its handoff, the generation-only rest; greedy, so the tokens
    must equal an aggregated run of the same prompt on the decode instance."""
    return asyncio.run(_disaggregated_matches_aggregated(model_options))


async def _disaggregated_matches_aggregated(model_options: dict[str, object]) -> Verdict:
    from tandem.engines.base import SamplingParams
    from tandem.engines.trtllm import TrtllmEngine, TrtllmEngineOptions

    # Small engines so both fit next to each other on one GPU; the NIXL transceiver
    # and no overlap scheduler on the context side, as config.py renders them.
    common = {
        "kv_cache_config": {"free_gpu_memory_fraction": 0.3},
        "cache_transceiver_config": {"backend": "NIXL"},
        "max_seq_len": 1024,
    }
    sampling = SamplingParams(max_tokens=_MAX_TOKENS)
    started = time.monotonic()
    engines: dict[str, TrtllmEngine] = {}
    try:
        engines = {
            role: TrtllmEngine(
                TrtllmEngineOptions.from_options(
                    {
                        **model_options,
                        "role": role,
                        "llm_args": {**common, "disable_overlap_scheduler": role == "prefill"},
                    }
                )
            )
            for role in ("prefill", "decode")
        }
        for engine in engines.values():
            await engine.start()
        handoff = await engines["prefill"].prefill("check-1", _PROMPT, sampling)
        decode = engines["decode"]
        rest = [step.token async for step in decode.generate("check-1", _PROMPT, sampling, handoff)]
        aggregated = [step.token async for step in decode.generate("check-2", _PROMPT, sampling)]
    except Exception as exc:  # the verdict names whatever the real engine raised
        return Verdict("trtllm engine", False, f"{type(exc).__name__}: {exc}")
    finally:
        for engine in engines.values():
            await engine.close()
    tokens = [handoff.first_token, *rest]
    if len(tokens) != _MAX_TOKENS:
        return Verdict("trtllm engine", False, f"{len(tokens)} tokens, asked for {_MAX_TOKENS}")
    if tokens != aggregated:
        return Verdict("trtllm engine", False, f"disaggregated {tokens} != aggregated {aggregated}")
    elapsed = time.monotonic() - started
    return Verdict("trtllm engine", True, f"prefill -> decode handoff, {tokens} in {elapsed:.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem_dev.gpu_check", description=__doc__)
    parser.add_argument("--model", required=True, help="a small model's directory")
    parser.add_argument("--vocab-size", type=int, help="for a model Tandem does not know")
    parser.add_argument("--eos-token-id", type=int, help="for a model Tandem does not know")
    parser.add_argument("--mem", choices=("VRAM", "DRAM"), default="VRAM")
    parser.add_argument("--allow-no-gpu", action="store_true", help="run on CPU anyway (tests)")
    args = parser.parse_args(argv)
    gpus = gpu_count()
    if gpus == 0 and not args.allow_no_gpu:
        print("gpu-check: no GPU: skipped (nvidia-smi lists none); nothing was checked")
        return NO_GPU
    print(f"gpu-check: {gpus} GPU(s)")
    # A model Tandem's catalogue lacks needs its vocabulary size and end token spelled out.
    model: dict[str, object] = {"model": args.model}
    if args.vocab_size is not None:
        model["vocab_size"] = args.vocab_size
    if args.eos_token_id is not None:
        model["eos_token_id"] = args.eos_token_id
    verdicts = [nixl_transfer(args.mem), trtllm_engine(model)]
    for verdict in verdicts:
        print(verdict.line())
    failed = [v.name for v in verdicts if not v.ok]
    print(f"gpu-check: {'FAILED: ' + ', '.join(failed) if failed else 'all checks passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
