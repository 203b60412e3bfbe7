# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
# Versions in the server's venv, printed as one JSON object (run by roles/server for the deployment record).
import importlib.metadata
import json

out = {"torch": None, "torch_cuda": None, "sglang_version": None, "sglang_commit": None}
try:
    import torch

    out["torch"] = str(torch.__version__)
    out["torch_cuda"] = torch.version.cuda
except Exception:  # any failure means "unknown"
    pass
try:
    dist = importlib.metadata.distribution("sglang")
    out["sglang_version"] = dist.version
    direct = dist.read_text("direct_url.json")
    if direct:
        out["sglang_commit"] = (json.loads(direct).get("vcs_info") or {}).get("commit_id")
except Exception:
    try:
        import sglang

        out["sglang_version"] = getattr(sglang, "__version__", None)
    except Exception:
        pass
print(json.dumps(out))
