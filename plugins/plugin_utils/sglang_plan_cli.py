# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Plan SGLang's GPU memory: KV-pool tokens, headroom for CUDA graphs, and a mem_fraction_static that fits.

Run it with any Python 3.11+ that sees the collection (stdlib only), e.g. from an installed collection:
  PYTHONPATH=~/.ansible/collections python3 -m ansible_collections.llmops.sglang.plugins.plugin_utils.sglang_plan_cli
(in a checkout of the collection: bin/sglang-plan). Examples, as sglang-plan:
  sglang-plan --model /models/GLM-5 --gpu-mem-mib 97887 --tp 8 --gpu-arch sm_120
  sglang-plan --model config.json --gpu-mem-mib 97887 --tp 8 --mem-fraction-static 0.88 \\
      --free-at-start-gib 94.25 --weights-gib 61.05 --sglang-version 0.5.9 --gpu-arch sm_120 --json

Exit codes: 0 plan printed (whatever the verdict), 2 bad input, 3 verdict not "ok" and --strict given.
The arithmetic lives in plugins/module_utils/sglang_memory.py; docs/memory.md explains it.
"""

import argparse
import json
import math
import sys
from pathlib import Path


from ansible_collections.llmops.sglang.plugins.module_utils import sglang_memory as mem
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_release as rel


def _number(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}: give a plain decimal number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}: give a plain decimal number")
    return value


def _fraction(text):
    value = _number(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1), got {text}: give e.g. 0.88")
    return value


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}: give e.g. 8") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}: give e.g. 8")
    return value


def _positive_float(text):
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}: give the measured or known size")
    return value


def _nonneg_float(text):
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}: give 0 or more")
    return value


class _Parser(argparse.ArgumentParser):
    """Bad input is one line (what was expected, what was found), exit 2; --help still prints the usage."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser():
    ap = _Parser(
        prog="sglang-plan",
        description="Predict SGLang's start-up memory on one GPU rank and recommend --mem-fraction-static.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Without --mem-fraction-static the plan uses SGLang's default for the version and recommends one.",
    )
    ap.add_argument("--model", required=True, help="model directory (config.json + safetensors) or its config.json")
    ap.add_argument("--gpu-mem-mib", type=_positive_float, help="nvidia-smi memory.total of the smallest GPU (MiB)")
    ap.add_argument("--tp", type=_positive_int, default=1, help="tensor-parallel size (default 1)")
    ap.add_argument("--pp", type=_positive_int, default=1, help="pipeline-parallel size (default 1)")
    ap.add_argument("--mem-fraction-static", type=_fraction, help="fraction to evaluate (default: SGLang's default)")
    ap.add_argument("--kv-cache-dtype", default="auto", help="auto, bf16, fp16, fp8_e4m3, fp8_e5m2, fp4_e2m1")
    ap.add_argument("--page-size", type=_positive_int, help="KV page size (default: 64 for DSA models, else 1)")
    ap.add_argument("--sglang-version", default=None, help="SGLang version X.Y.Z (default: the host's build record)")
    ap.add_argument(
        "--sglang-record",
        default=rel.DEFAULT_RECORD_PATH,
        help=f"the build stage's record of the installed SGLang, read when --sglang-version is not given "
        f"(default {rel.DEFAULT_RECORD_PATH})",
    )
    ap.add_argument("--gpu-arch", help="compute capability, e.g. sm_120, sm_90 (decides DSA KV dtype, overhead)")
    ap.add_argument("--weights-gib", type=_positive_float, help="weights per rank in GiB (default: from checkpoint)")
    ap.add_argument("--free-at-start-gib", type=_positive_float, help='measured "Load weight begin. avail mem"')
    ap.add_argument("--free-after-weights-gib", type=_number, help='measured "Load weight end. avail mem"')
    ap.add_argument("--cuda-graph-max-bs", type=_positive_int, help="largest captured decode batch size")
    ap.add_argument("--disable-cuda-graph", action="store_true", help="plan without decode CUDA graphs")
    ap.add_argument("--cuda-graph-need-gib", type=_nonneg_float, help="measured graph capture memory (GiB)")
    ap.add_argument(
        "--margin-gib",
        type=_nonneg_float,
        default=mem.DEFAULT_MARGIN_GIB,
        help=f"headroom kept above the graph need when recommending (default {mem.DEFAULT_MARGIN_GIB})",
    )
    ap.add_argument("--context-overhead-gib", type=_nonneg_float, help="GiB lost before weights load (default by arch)")
    ap.add_argument("--max-total-tokens", type=_positive_int, help="SGLang --max-total-tokens cap")
    ap.add_argument("--max-running-requests", type=_positive_int, help="SGLang --max-running-requests")
    ap.add_argument("--context-length", type=_positive_int, help="SGLang --context-length (default: the model's)")
    ap.add_argument("--dp", type=_positive_int, default=1, help="--dp with --enable-dp-attention (default 1)")
    ap.add_argument(
        "--speculative-algorithm",
        type=str.upper,
        choices=rel.SPECULATIVE_ALGORITHMS,
        help="SGLang --speculative-algorithm",
    )
    ap.add_argument("--speculative-draft-model", help="draft model directory (or its config.json)")
    ap.add_argument("--speculative-draft-layers", type=_positive_int, help="draft layers (default: from the configs)")
    ap.add_argument("--speculative-num-draft-tokens", type=_positive_int, help="SGLang --speculative-num-draft-tokens")
    ap.add_argument("--nsa-backend", help="--nsa-prefill/decode-backend of a DSA model (trtllm keeps 576 B/layer)")
    ap.add_argument(
        "--attention",
        choices=("mha", "mla", "dsa"),
        help="KV layout of an architecture no SGLang release registers (otherwise refused)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--strict", action="store_true", help="exit 3 when the verdict is not ok")
    return ap


def _fmt_opt(value, fmt):
    return "-" if value is None else format(value, fmt)


def render(p):
    d = p.as_dict()
    lines = [
        f"SGLang {d['sglang_version']}  model family {d['model_family']}  KV dtype {d['kv_cache_dtype']}  "
        f"page {d['page_size']}",
        f"  free at start          {d['free_at_start_gib']:8.2f} GiB",
        f"  weights per rank       {d['weights_per_rank_gib']:8.2f} GiB",
        f"  free after weights     {d['free_after_weights_gib']:8.2f} GiB",
        f"  mem_fraction_static    {d['mem_fraction_static']:8.3f}   "
        f"(SGLang default {d['default_mem_fraction_static']})",
        f"  KV budget              {d['kv_budget_gib']:8.2f} GiB at {d['cell_bytes_budget']} B/token",
        f"  KV tokens              {d['kv_tokens']:8d}",
        f"  KV pool                {d['kv_pool_gib']:8.2f} GiB at {d['cell_bytes_actual']} B/token",
        f"  request-to-token table {d['req_to_token_gib']:8.2f} GiB",
        f"  avail after pool       {d['avail_after_pool_gib']:8.2f} GiB",
        f"  CUDA graph need (est.) {d['cuda_graph_need_gib']:8.2f} GiB  "
        f"(max bs {d['cuda_graph_max_bs']}, {len(d['cuda_graph_batch_sizes'])} sizes)",
        f"  verdict                {d['verdict']}",
        f"  recommended fraction   {_fmt_opt(d['recommended_mem_fraction_static'], '.2f')}"
        f"   (keeps graphs + {d['margin_gib']} GiB margin)",
    ]
    if d["speculative_algorithm"]:
        lines.append(
            f"  speculative            {d['speculative_algorithm']}, {d['draft_layers']} draft layer(s), draft pool "
            f"{d['draft_pool_gib']:.2f} GiB outside the budget"
            if d["draft_pool_gib"]
            else f"  speculative            {d['speculative_algorithm']}, {d['draft_layers']} draft layer(s) in the "
            "budgeted cell"
        )
    if d["recommended_cuda_graph_max_bs"] is not None:
        lines.append(f"  recommended graph max bs {d['recommended_cuda_graph_max_bs']}")
    lines.extend(f"  note: {n}" for n in d["notes"])
    return "\n".join(lines)


def main(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.free_after_weights_gib is not None and args.free_at_start_gib is None:
        ap.error("--free-after-weights-gib needs --free-at-start-gib (both come from the same log)")
    if args.gpu_mem_mib is None and args.free_at_start_gib is None:
        ap.error("give --gpu-mem-mib (or a measured --free-at-start-gib)")
    model = Path(args.model)
    if not model.exists():
        ap.error(f"--model {args.model}: no such file or directory")
    try:
        version = rel.resolve_sglang_version(args.sglang_version, args.sglang_record)
        p = mem.plan(
            model,
            gpu_mem_mib=args.gpu_mem_mib,
            tp=args.tp,
            pp=args.pp,
            mem_fraction_static=args.mem_fraction_static,
            kv_cache_dtype=args.kv_cache_dtype,
            page_size=args.page_size,
            sglang_version=version,
            gpu_arch=args.gpu_arch,
            weights_gib=args.weights_gib,
            free_at_start_gib=args.free_at_start_gib,
            free_after_weights_gib=args.free_after_weights_gib,
            cuda_graph_max_bs=args.cuda_graph_max_bs,
            disable_cuda_graph=args.disable_cuda_graph,
            cuda_graph_need=args.cuda_graph_need_gib,
            margin_gib=args.margin_gib,
            context_overhead=args.context_overhead_gib,
            max_total_tokens=args.max_total_tokens,
            max_running_requests=args.max_running_requests,
            context_length=args.context_length,
            dp=args.dp,
            speculative_algorithm=args.speculative_algorithm,
            speculative_draft_model=args.speculative_draft_model,
            speculative_draft_layers=args.speculative_draft_layers,
            speculative_num_draft_tokens=args.speculative_num_draft_tokens,
            nsa_backend=args.nsa_backend,
            attention=args.attention,
        )
    except (mem.PlanError, OSError) as exc:
        print(f"sglang-plan: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(p.as_dict()))
    else:
        print(render(p))
    if args.strict and p.verdict != "ok":
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
