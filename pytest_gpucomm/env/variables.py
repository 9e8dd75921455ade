"""Which environment variables a run records: those that change communication figures, and never a secret.

The fingerprint of a run keeps the variables that steer the communication stack and the host threads
beside it, so that a verdict can say "OMP_NUM_THREADS 2 -> 1" and the cause test
(:mod:`pytest_gpucomm.gate.cause`) can set one back.  Recorded:

* every variable whose name starts with one of :data:`PREFIXES`: the collective libraries (``NCCL_``,
  ``RCCL_``), the GPU runtimes (``CUDA_``, ``HIP_``, ``HSA_``, ``ROCR_``, ``GPU_``), the transports (``UCX_``,
  ``FI_``, ``NVSHMEM_``), gloo (``GLOO_``) and torch's communication settings (``TORCH_NCCL_``,
  ``TORCH_DISTRIBUTED_``, ``TORCH_GLOO_``, ``TORCH_SYMM_MEM_``, and ``PYTORCH_CUDA_ALLOC_CONF``);
* the thread counts and placements of the host libraries (:data:`THREAD_VARIABLES`): ``OMP_NUM_THREADS`` and
  its peers change how fast torch copies host memory and how a rank's CPU work competes with its transfers;
* the names a user adds (``--gpucomm-env`` / ini ``gpucomm_env``), each a name or a shell pattern
  (``MY_FABRIC_*``).

Whatever matches, a variable whose name says it holds a secret is never recorded (:func:`is_secret`: a name
part such as ``TOKEN``, ``SECRET``, ``PASSWORD``, ``CREDENTIALS`` or one ending in ``KEY``): its value would
otherwise go into report files and baselines that are committed and shared.  Standard library only.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Iterable, Mapping

__all__ = ["PREFIXES", "THREAD_VARIABLES", "NOT_SECRET", "EnvNamesError", "is_secret", "parse_env_names",
           "recorded_environment"]

#: names starting with one of these are recorded
PREFIXES: tuple[str, ...] = (
    "NCCL_", "RCCL_", "CUDA_", "HIP_", "HSA_", "ROCR_", "GPU_", "UCX_", "FI_", "NVSHMEM_", "GLOO_",
    "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "TORCH_GLOO_", "TORCH_SYMM_MEM_", "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
)

#: the host libraries' thread counts and placements, recorded by name
THREAD_VARIABLES: frozenset[str] = frozenset({
    "OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "OMP_WAIT_POLICY", "GOMP_CPU_AFFINITY", "KMP_AFFINITY",
    "KMP_BLOCKTIME", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS", "TORCH_NUM_THREADS", "TORCHINDUCTOR_COMPILE_THREADS",
})

#: names that look like secrets by the rule below but are settings (NCCL's InfiniBand partition key)
NOT_SECRET: frozenset[str] = frozenset({"NCCL_IB_PKEY"})

# one part of a name (split at "_"): these words, or a part ending in KEY/KEYS/TOKEN/TOKENS
_SECRET_PART = re.compile(
    r"^(?:.*KEYS?|.*TOKENS?|SECRETS?|.*SECRET|PASS|PASSWORD|PASSWD|PASSPHRASE|PWD|CREDENTIALS?|CREDS?|AUTH|"
    r"AUTHORIZATION|COOKIES?|PRIVATE|SIGNATURE|SALT|CERT|CERTIFICATE|SAS|SIG|DSN|WEBHOOK)$"
)
_NAME = re.compile(r"^[A-Za-z_*?][A-Za-z0-9_*?]*$")


class EnvNamesError(ValueError):
    """A bad ``--gpucomm-env`` value; the message names it and where it came from."""


def is_secret(name: str) -> bool:
    """Whether the variable ``name`` may hold a secret (it is then never recorded): a part of the name,
    split at underscores, is a word such as TOKEN, SECRET, PASSWORD, CREDENTIALS or AUTH, or ends in KEY
    (``AWS_SECRET_ACCESS_KEY``, ``HF_TOKEN``, ``WANDB_API_KEY``, ``NCCL_NET_PLUGIN_AUTH``).  :data:`NOT_SECRET`
    lists the exceptions."""
    upper = name.upper()
    if upper in NOT_SECRET:
        return False
    return any(_SECRET_PART.match(part) for part in upper.split("_") if part)


def parse_env_names(value: str | Iterable[str], where: str) -> tuple[str, ...]:
    """The names and patterns of a ``--gpucomm-env`` value: comma- or space-separated names of variables, or
    shell patterns (``MY_FABRIC_*``).  EnvNamesError names a bad one and ``where`` it came from."""
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        for name in re.split(r"[,\s]+", item.strip()):
            if not name:
                continue
            if not _NAME.match(name):
                raise EnvNamesError(f"invalid environment variable name {name!r} (from {where}): use letters, "
                                    "digits and '_', with '*' or '?' for a pattern (e.g. MY_FABRIC_*)")
            if name not in out:
                out.append(name)
    return tuple(out)


def recorded_environment(environ: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """The variables of ``environ`` a run records, sorted by name: :data:`PREFIXES`, :data:`THREAD_VARIABLES`
    and the names or patterns in ``extra``, less every name :func:`is_secret` refuses."""
    patterns = tuple(extra)
    out: dict[str, str] = {}
    for name in sorted(environ):
        wanted = (name.startswith(PREFIXES) or name in THREAD_VARIABLES
                  or any(fnmatch.fnmatchcase(name, p) for p in patterns))
        if wanted and not is_secret(name):
            out[name] = environ[name]
    return out
