"""The regression gate: per-hardware baseline files, the statistical decision, and the session's verdicts.

* :mod:`.decision`    -- the pure statistics: a run's location (``run_location``), a case's baseline model
  (``fit_case``, ``fit_prior``), ``compare`` / ``judge`` with re-measures (numpy, scipy); ``check_floor``
  against a published floor is in :mod:`.floors`.
* :mod:`.levels`      -- the run judged at the end: class offsets, op bands, case residuals (``judge_run``).
* :mod:`.store`       -- the baseline file: read and validate, merge a run in under a lock, write
  atomically (jsonschema, filelock); its schema and the checks beyond it in :mod:`.schema`, a case's key and
  record in :mod:`.cases`, NAME|PATH|auto resolved to a file in :mod:`.names` (the user's folder, then the
  baselines shipped with the package: :mod:`.shipped`), a file's runs of this machine in :mod:`.machines`.
* :mod:`.tails`       -- the TAIL rule: a case's one-op tail against the baseline's (the histograms and
  sketches it reads in :mod:`pytest_gpucomm.sketches`; a case's tail verdict in :mod:`.tail_verdict`).
* :mod:`.calibration` -- leave-one-session-out on a baseline file, the figures behind the gate's defaults; the
  corpus prior checked leave-one-machine-out in :mod:`.calibration_corpus`.
* :mod:`.prior`       -- the spread prior of the corpus: one-session cases of hardware no file covers take their
  spread between sessions from it (``spread_prior.json``, fitted on the shipped baselines).
* what changed in the environment since the baseline was recorded is :mod:`pytest_gpucomm.env.fingerprint`'s.
* :mod:`.verdicts`    -- :class:`Gate`, the session object the plugin drives, with its :class:`GateSettings`
  and the :class:`Verdict` it gives each measurement (a :class:`pytest_gpucomm.vocab.Status`); what it fits of
  a baseline, once, in :mod:`.baseline_fit` (:class:`~.baseline_fit.FittedBaseline`).

The gate judges and does nothing else: the commands that run it again on a saved report (``gpucomm compare``,
:mod:`pytest_gpucomm.cli.regate`) and keep baseline files by hand (``gpucomm baselines ...``, ``gpucomm env``)
are the ``gpucomm`` command's (:mod:`pytest_gpucomm.cli`), above the reports, which this package never imports.

Importing this package, building a ``Gate`` and asking ``.active`` / ``.loaded`` is cheap: the decision
and store names are resolved on first use (module ``__getattr__``), so numpy, scipy, jsonschema and
filelock are imported only when a baseline is actually read, judged against or written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

from ..env.fingerprint import ABSENT, VOLATILE_KEYS, diff_fingerprints, format_fingerprint_diff

#: the names imported on first use, and the submodule of each (numpy and scipy, or jsonschema and filelock; the
#: session's gate itself, so that a session with no baseline, which only looks up the shipped folders, imports none)
_LAZY: dict[str, str] = {
    **dict.fromkeys(["Gate", "GateSettings", "GateUsageError", "Verdict"], "verdicts"),
    **dict.fromkeys(["DECISION_RULE", "RunLocation", "run_location", "CaseModel", "fit_case", "Prior", "fit_prior",
                     "prior_class", "Spread", "prediction", "Comparison", "compare", "judge", "detectable_drop",
                     "corrected_alpha"],
                    "decision"),
    **dict.fromkeys(["Common", "common_spread", "run_offsets"], "levels"),
    **dict.fromkeys(["FloorCheck", "check_floor"], "floors"),
    **dict.fromkeys(["SCHEMA_ID", "SCHEMA_VERSION", "JSON_SCHEMA", "BaselineError"], "schema"),
    **dict.fromkeys(["BaselineNotFound", "baseline_name_for_model", "available_baselines", "resolve_baseline"],
                    "names"),
    **dict.fromkeys(["CaseRecord", "case_key"], "cases"),
    **dict.fromkeys(["Baseline", "CaseEntry", "CaseRun", "RunRecord", "load_baseline", "save_run", "new_document",
                     "dumps_document", "write_document"], "store"),
}

__all__ = ["ABSENT", "VOLATILE_KEYS", "diff_fingerprints", "format_fingerprint_diff", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)


if TYPE_CHECKING:
    from .verdicts import Gate, GateSettings, GateUsageError, Verdict  # noqa: F401
    from .decision import (  # noqa: F401
        DECISION_RULE,
        CaseModel,
        Comparison,
        Prior,
        RunLocation,
        Spread,
        compare,
        corrected_alpha,
        detectable_drop,
        fit_case,
        fit_prior,
        judge,
        prediction,
        prior_class,
        run_location,
    )
    from .cases import CaseRecord, case_key  # noqa: F401
    from .names import BaselineNotFound, available_baselines, baseline_name_for_model, resolve_baseline  # noqa: F401
    from .schema import JSON_SCHEMA, SCHEMA_ID, SCHEMA_VERSION, BaselineError  # noqa: F401
    from .floors import FloorCheck, check_floor  # noqa: F401
    from .levels import Common, common_spread, run_offsets  # noqa: F401
    from .store import (  # noqa: F401
        Baseline,
        CaseEntry,
        CaseRun,
        RunRecord,
        dumps_document,
        load_baseline,
        new_document,
        save_run,
        write_document,
    )
