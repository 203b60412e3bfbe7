# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.bench_problems (docs: plugins/filter/bench_problems.yml).

The knowledge lives in module_utils/sglang_bench.py; this file only adapts it to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_bench as _bench


def bench_problems(values, prefix):
    """One sentence per wrong benchmark variable (``values``: {suffix: value}; ``prefix``: server_bench, ...)."""
    return _bench.problems(values if isinstance(values, dict) else {}, str(prefix))


class FilterModule(object):
    def filters(self):
        return {"bench_problems": bench_problems}
