"""Run flash-attention's own setup.py (from its real sdist) far enough to read the nvcc flags it would build with.

    python flash_attn_setup.py SDIST_DIR [--real-torch]

setup.py is executed as pip would (cwd = the unpacked sdist, `__name__ == "__main__"`) with FLASH_ATTN_CUDA_ARCHS,
CUDA_HOME and FLASH_ATTENTION_FORCE_BUILD from the environment; `setuptools.setup` records its arguments instead of
building. Its `get_cuda_bare_metal_version` runs the real `$CUDA_HOME/bin/nvcc -V`.

torch: by default a stand-in package of what setup.py imports from torch (`torch.__version__`, and from
`torch.utils.cpp_extension`: `CUDAExtension` recording its arguments, `CUDA_HOME` from the environment,
`IS_HIP_EXTENSION = False`); with --real-torch the installed torch, whose `BuildExtension` would add its own arch
flags (`_get_cuda_arch_flags`) when setup.py passes none -- printed too.

Prints JSON: {"nvcc": [the extension's nvcc args], "gencode": [...], "torch_adds": [...] | null}.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
from pathlib import Path

_STANDIN = {
    "torch/__init__.py": (
        "__version__ = '2.9.1+cu128'\n"
        "class version:\n    cuda = '12.8'\n    hip = None\n"
        "class _C:\n    _GLIBCXX_USE_CXX11_ABI = True\n"
    ),
    "torch/utils/__init__.py": "",
    "torch/utils/cpp_extension.py": (
        "import os\n"
        "CUDA_HOME = os.environ.get('CUDA_HOME')\nROCM_HOME = None\nIS_HIP_EXTENSION = False\n"
        "EXTENSIONS = []\n"
        "class BuildExtension:\n    pass\n"
        "def CUDAExtension(name, sources, **kw):\n"
        "    EXTENSIONS.append(dict(kw, name=name, sources=sources))\n    return EXTENSIONS[-1]\n"
        "def CppExtension(name, sources, **kw):\n    return CUDAExtension(name, sources, **kw)\n"
    ),
}


def gencodes(nvcc_args):
    """['-gencode', 'arch=compute_120,code=sm_120', ...] -> ['arch=compute_120,code=sm_120']."""
    out = []
    for i, a in enumerate(nvcc_args):
        if a == "-gencode" and i + 1 < len(nvcc_args):
            out.append(nvcc_args[i + 1])
        elif a.startswith("-gencode="):
            out.append(a.split("=", 1)[1])
    return out


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    real = "--real-torch" in argv
    src = Path(next(a for a in argv if not a.startswith("--"))).resolve()
    recorded = {}
    import setuptools

    def fake_setup(**kw):
        recorded.update(kw)

    setuptools.setup = fake_setup
    with tempfile.TemporaryDirectory() as tmp:
        if not real:
            for rel, text in _STANDIN.items():
                (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
                (Path(tmp) / rel).write_text(text)
            sys.path.insert(0, tmp)
        os.chdir(src)
        sys.path.insert(0, str(src))
        sys.argv = [str(src / "setup.py"), "bdist_wheel"]
        out = sys.stdout
        sys.stdout = sys.stderr  # setup.py prints its banner; the JSON goes to the real stdout
        try:
            runpy.run_path(str(src / "setup.py"), run_name="__main__")
        finally:
            sys.stdout = out
    ext = next((e for e in recorded.get("ext_modules", []) if "flash_attn_2_cuda" in str(getattr(e, "name", e))), None)
    if ext is None:
        print(json.dumps({"error": "setup.py declared no flash_attn_2_cuda extension"}))
        return 2
    args = ext["extra_compile_args"] if isinstance(ext, dict) else ext.extra_compile_args
    nvcc = list(args["nvcc"])
    torch_adds = None
    if real:
        from torch.utils import cpp_extension

        torch_adds = cpp_extension._get_cuda_arch_flags(nvcc)
    print(json.dumps({"nvcc": nvcc, "gencode": gencodes(nvcc), "torch_adds": torch_adds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
