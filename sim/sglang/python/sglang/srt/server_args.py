"""The server arguments (argparse front-end + resolved values), after SGLang 0.5.9's ``server_args.py``."""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import re
from dataclasses import dataclass

from sglang.srt import sim_memory, sim_release_options
from sglang.srt.utils.common import FAMILIES, FAMILY_0514, FAMILY_MAIN, LOG_FORMAT_ENV, log_family

ATTENTION_BACKEND_CHOICES = [
    "triton",
    "torch_native",
    "flex_attention",
    "nsa",
    "cutlass_mla",
    "fa3",
    "fa4",
    "flashinfer",
    "flashmla",
    "trtllm_mla",
    "trtllm_mha",
    "dual_chunk_flash_attn",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
]
QUANTIZATION_CHOICES = [
    "awq",
    "fp8",
    "gptq",
    "marlin",
    "gptq_marlin",
    "awq_marlin",
    "bitsandbytes",
    "gguf",
    "modelopt",
    "modelopt_fp8",
    "modelopt_fp4",
    "petit_nvfp4",
    "w8a8_int8",
    "w8a8_fp8",
    "moe_wna16",
    "qoq",
    "w4afp8",
    "mxfp4",
    "compressed-tensors",
]
LOAD_FORMAT_CHOICES = [
    "auto",
    "pt",
    "safetensors",
    "npcache",
    "dummy",
    "sharded_state",
    "gguf",
    "bitsandbytes",
    "layered",
]
DTYPE_CHOICES = ["auto", "half", "float16", "bfloat16", "float", "float32"]
NSA_PREFILL_CHOICES = ["flashmla_sparse", "flashmla_kv", "flashmla_auto", "fa3", "tilelang", "aiter"]
NSA_DECODE_CHOICES = ["flashmla_sparse", "flashmla_kv", "fa3", "tilelang", "aiter"]

# Fields only printed by one log-format family.
_FAMILY_ONLY = {
    "cuda_graph_max_bs_decode": FAMILY_0514,
    "cuda_graph_max_bs_prefill": FAMILY_0514,
    "disable_piecewise_cuda_graph": FAMILY_0514,
}


@dataclass
class ServerArgs:
    # Model and tokenizer
    model_path: str
    tokenizer_path: str | None = None
    tokenizer_mode: str = "auto"
    skip_tokenizer_init: bool = False
    load_format: str = "auto"
    model_loader_extra_config: str = "{}"
    trust_remote_code: bool = False
    context_length: int | None = None
    is_embedding: bool = False
    revision: str | None = None
    model_impl: str = "auto"
    # HTTP server
    host: str = "127.0.0.1"
    port: int = 30000
    nccl_port: int | None = None
    skip_server_warmup: bool = False
    # Quantization and data type
    dtype: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    # Memory and scheduling
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    max_queued_requests: int | None = None
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    page_size: int | None = None
    # Runtime options
    device: str | None = "cuda"
    tp_size: int = 1
    pp_size: int = 1
    stream_interval: int = 1
    random_seed: int | None = None
    watchdog_timeout: float = 300
    dist_timeout: int | None = None
    download_dir: str | None = None
    base_gpu_id: int = 0
    gpu_id_step: int = 1
    # Logging
    log_level: str = "info"
    log_level_http: str | None = None
    log_requests: bool = False
    show_time_cost: bool = False
    enable_metrics: bool = False
    # API related
    api_key: str | None = None
    admin_api_key: str | None = None
    served_model_name: str | None = None
    chat_template: str | None = None
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    # Data parallelism / multi-node
    dp_size: int = 1
    load_balance_method: str = "round_robin"
    dist_init_addr: str | None = None
    nnodes: int = 1
    node_rank: int = 0
    json_model_override_args: str = "{}"
    # Kernel backends
    attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    decode_attention_backend: str | None = None
    nsa_prefill_backend: str | None = None
    nsa_decode_backend: str | None = None
    moe_runner_backend: str = "auto"
    ep_size: int = 1
    enable_dp_attention: bool = False
    # Speculative decoding
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    # Optimization / debug
    disable_radix_cache: bool = False
    cuda_graph_max_bs: int | None = None
    cuda_graph_bs: list[int] | None = None
    cuda_graph_max_bs_decode: int | None = None
    cuda_graph_max_bs_prefill: int | None = None
    disable_cuda_graph: bool = False
    disable_cuda_graph_padding: bool = False
    enable_piecewise_cuda_graph: bool = False
    disable_piecewise_cuda_graph: bool = False
    disable_custom_all_reduce: bool = False
    enable_torch_compile: bool = False
    enable_cache_report: bool = False
    file_storage_path: str = "sglang_storage"
    # Simulation only (never printed)
    sim_log_format: str = FAMILY_MAIN

    def __repr__(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            if f.name == "sim_log_format":
                continue
            only = _FAMILY_ONLY.get(f.name)
            if only is not None and only != self.sim_log_format:
                continue
            parts.append(f"{f.name}={getattr(self, f.name)!r}")
        return f"ServerArgs({', '.join(parts)})"

    def public_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("sim_log_format", None)
        for name, fam in _FAMILY_ONLY.items():
            if fam != self.sim_log_format:
                d.pop(name, None)
        return d

    # -------------------------------------------------------------------------------------------------------------
    def resolve(self, gpu_mem_mib: float | None, capability: tuple[int, int] | None, model_config) -> list[str]:
        """Fill the automatic values like ``ServerArgs.__post_init__``; returns the warnings to log."""
        warnings: list[str] = []
        if self.tokenizer_path is None:
            self.tokenizer_path = self.model_path
        if self.served_model_name is None:
            self.served_model_name = self.model_path
        if self.random_seed is None:
            self.random_seed = random.randint(0, 1 << 30)
        if self.sim_log_format == FAMILY_0514 and self.cuda_graph_max_bs_decode is not None:
            self.cuda_graph_max_bs = self.cuda_graph_max_bs_decode
        if self.cuda_graph_bs is not None:
            self.cuda_graph_max_bs = max(self.cuda_graph_bs)
        chunked, max_bs = sim_memory.default_chunked_prefill_and_graph_bs(gpu_mem_mib, self.tp_size)
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = chunked
        if self.cuda_graph_max_bs is None:
            self.cuda_graph_max_bs = max_bs
        if self.mem_fraction_static is None:
            self.mem_fraction_static = sim_memory.default_mem_fraction_static(
                gpu_mem_mib,
                self.tp_size,
                self.pp_size,
                self.chunked_prefill_size,
                self.cuda_graph_max_bs,
                dp_attention_size=self.dp_size if self.enable_dp_attention else 0,
                speculative_algorithm=self.speculative_algorithm if self.sim_log_format != FAMILY_0514 else None,
            )
        if self.speculative_algorithm == "NEXTN":
            self.speculative_algorithm = "EAGLE"  # as SGLang: NEXTN is served by the EAGLE worker with the MTP layers
            if self.speculative_draft_model_path is None:
                self.speculative_draft_model_path = self.model_path
        if (
            self.speculative_algorithm in ("EAGLE", "EAGLE3", "STANDALONE")
            and self.speculative_num_draft_tokens is None
        ):
            self.speculative_num_steps, self.speculative_eagle_topk, self.speculative_num_draft_tokens = 3, 1, 4
        if self.cuda_graph_bs is None:
            self.cuda_graph_bs = sim_memory.default_cuda_graph_bs(self.cuda_graph_max_bs)
        if self.sim_log_format == FAMILY_0514:
            self.cuda_graph_max_bs_decode = self.cuda_graph_max_bs
        major = capability[0] if capability else 0
        if model_config is not None and model_config.is_dsa:
            if self.page_size is None or self.page_size != 64:
                self.page_size = 64
                warnings.append("Setting page size to 64 for DeepSeek DSA.")
            if self.attention_backend is None:
                self.attention_backend = "nsa"
            if self.kv_cache_dtype == "auto" and major >= 10:
                self.kv_cache_dtype = "fp8_e4m3"
                warnings.append(f"Setting KV cache dtype to fp8_e4m3 for DeepSeek DSA on SM{major} device.")
            if self.kv_cache_dtype == "fp8_e4m3":
                if self.nsa_prefill_backend is None:
                    self.nsa_prefill_backend = "flashmla_auto"
                if self.nsa_decode_backend is None:
                    self.nsa_decode_backend = "flashmla_kv"
                warnings.append(
                    f"Set NSA backends for fp8_e4m3 KV Cache: prefill={self.nsa_prefill_backend}, "
                    f"decode={self.nsa_decode_backend}."
                )
            if major >= 10 and model_config.architecture == "GlmMoeDsaForCausalLM":
                warnings.append(
                    "Force NSA prefill to use MLA (i.e. disable MHA_ONE_SHOT) for GlmMoeDsaForCausalLM on Blackwell."
                )
        else:
            if self.page_size is None:
                self.page_size = 1
            if self.attention_backend is None:
                self.attention_backend = "flashinfer"
                warnings.append("Attention backend not specified. Use flashinfer backend by default.")
        return warnings


def _release_key(version: str) -> tuple:
    m = re.match(r"^(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


def _nonneg_float(value: str) -> float:
    return float(value)


def make_parser(family: str = FAMILY_MAIN) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument(
        "--model-path",
        "--model",
        type=str,
        required=True,
        help="The path of the model weights. This can be a local folder or a Hugging Face repo ID.",
    )
    p.add_argument("--tokenizer-path", type=str, default=None)
    p.add_argument("--tokenizer-mode", type=str, default="auto", choices=["auto", "slow"])
    p.add_argument("--skip-tokenizer-init", action="store_true")
    p.add_argument("--load-format", type=str, default="auto", choices=LOAD_FORMAT_CHOICES)
    p.add_argument("--model-loader-extra-config", type=str, default="{}")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("--is-embedding", action="store_true")
    p.add_argument("--revision", type=str, default=None)
    p.add_argument("--model-impl", type=str, default="auto")
    p.add_argument("--host", type=str, default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--nccl-port", type=int, default=None)
    p.add_argument("--skip-server-warmup", action="store_true")
    p.add_argument("--dtype", type=str, default="auto", choices=DTYPE_CHOICES)
    p.add_argument("--quantization", type=str, default=None, choices=QUANTIZATION_CHOICES)
    p.add_argument("--kv-cache-dtype", type=str, default="auto", choices=sim_memory.KV_DTYPE_CHOICES)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--max-queued-requests", type=int, default=None)
    p.add_argument("--max-total-tokens", type=int, default=None)
    p.add_argument("--chunked-prefill-size", type=int, default=None)
    p.add_argument("--max-prefill-tokens", type=int, default=16384)
    p.add_argument(
        "--schedule-policy", type=str, default="fcfs", choices=["lpm", "random", "fcfs", "dfs-weight", "lof"]
    )
    p.add_argument("--schedule-conservativeness", type=float, default=1.0)
    p.add_argument("--page-size", type=int, default=None)
    p.add_argument("--device", type=str, default="cuda")
    p.add_argument("--tensor-parallel-size", "--tp-size", type=int, default=1, dest="tp_size")
    p.add_argument("--pipeline-parallel-size", "--pp-size", type=int, default=1, dest="pp_size")
    p.add_argument("--stream-interval", type=int, default=1)
    p.add_argument("--random-seed", type=int, default=None)
    p.add_argument("--watchdog-timeout", type=float, default=300)
    p.add_argument("--dist-timeout", type=int, default=None)
    p.add_argument("--download-dir", type=str, default=None)
    p.add_argument("--base-gpu-id", type=int, default=0)
    p.add_argument("--gpu-id-step", type=int, default=1)
    p.add_argument("--log-level", type=str, default="info")
    p.add_argument("--log-level-http", type=str, default=None)
    p.add_argument("--log-requests", action="store_true")
    p.add_argument("--show-time-cost", action="store_true")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--api-key", type=str, default=None)
    p.add_argument("--admin-api-key", type=str, default=None)
    p.add_argument("--served-model-name", type=str, default=None)
    p.add_argument("--chat-template", type=str, default=None)
    p.add_argument("--tool-call-parser", type=str, default=None)
    p.add_argument("--reasoning-parser", type=str, default=None)
    p.add_argument("--data-parallel-size", "--dp-size", type=int, default=1, dest="dp_size")
    p.add_argument("--load-balance-method", type=str, default="round_robin")
    p.add_argument("--dist-init-addr", "--nccl-init-addr", type=str, default=None, dest="dist_init_addr")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--json-model-override-args", type=str, default="{}")
    p.add_argument("--attention-backend", type=str, default=None, choices=ATTENTION_BACKEND_CHOICES)
    p.add_argument("--prefill-attention-backend", type=str, default=None, choices=ATTENTION_BACKEND_CHOICES)
    p.add_argument("--decode-attention-backend", type=str, default=None, choices=ATTENTION_BACKEND_CHOICES)
    p.add_argument("--nsa-prefill-backend", type=str, default=None, choices=NSA_PREFILL_CHOICES)
    p.add_argument("--nsa-decode-backend", type=str, default=None, choices=NSA_DECODE_CHOICES)
    p.add_argument("--moe-runner-backend", type=str, default="auto")
    p.add_argument("--expert-parallel-size", "--ep-size", type=int, default=1, dest="ep_size")
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument(
        "--speculative-algorithm", type=str, default=None, choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
    )
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model", type=str, default=None)
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--cuda-graph-max-bs", type=int, default=None)
    p.add_argument("--cuda-graph-bs", type=int, nargs="+", default=None)
    if family == FAMILY_0514:
        p.add_argument("--cuda-graph-max-bs-decode", type=int, default=None)
        p.add_argument("--cuda-graph-max-bs-prefill", type=int, default=None)
        p.add_argument("--disable-piecewise-cuda-graph", action="store_true")
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--disable-cuda-graph-padding", action="store_true")
    p.add_argument("--enable-piecewise-cuda-graph", action="store_true")
    p.add_argument("--disable-custom-all-reduce", action="store_true")
    p.add_argument("--enable-torch-compile", action="store_true")
    p.add_argument("--enable-cache-report", action="store_true")
    p.add_argument("--file-storage-path", type=str, default="sglang_storage")
    # Hidden: selects the simulated log-format family (env SGLANG_SIM_LOG_FORMAT does the same).
    p.add_argument("--sim-log-format", type=str, default=None, choices=list(FAMILIES), help=argparse.SUPPRESS)
    return p


def _without_sim_flags(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--sim-log-format":
            skip = True
        elif not a.startswith("--sim-log-format="):
            out.append(a)
    return out


def prepare_server_args(argv: list[str]) -> ServerArgs:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--sim-log-format", default=None)
    known, _ = pre.parse_known_args(argv)
    # First the real release's own option table (sim_release_options: unknown or ambiguous options exit 2 as that
    # release's argparse does), then the stand-in's parser for the values it simulates.
    release = sim_release_options.enforce(_without_sim_flags(argv))
    newer = release is not None and _release_key(release) >= (0, 5, 14)
    if known.sim_log_format is None and not os.environ.get(LOG_FORMAT_ENV) and newer:
        known.sim_log_format = FAMILY_0514  # a release from 0.5.14 on prints the 0.5.14 formats
    family = log_family(known.sim_log_format)
    ns = make_parser(family).parse_args(argv)
    kwargs = {k: v for k, v in vars(ns).items() if k != "sim_log_format"}
    return ServerArgs(**kwargs, sim_log_format=family)
