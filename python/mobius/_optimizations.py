"""The logger of the optimizer's ``[EP Trace]`` report (``trace_optimization=True``).

``logging.getLogger("mobius._optimizations")`` receives one INFO record per trace line; the
library's other messages go to ``mobius.*`` loggers named after its modules. No handler is
installed: ``logging.basicConfig(level=logging.INFO)`` shows them.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def log_trace(report: str) -> None:
    """Logs each line of an optimizer report at INFO on this module's logger."""
    for line in report.splitlines():
        if line.strip():
            logger.info("%s", line)
