"""The measured panels' queries: the speed-up measured against a baseline, the batch each side ran,
time per output token and inter-token latency per server, and time per output token by method.

Each reads a record of rules/measured.py on the dashboard's series selector: the per-server records
carry no engine label, so they answer at engine All; the per-model ones (the baseline, by method) no
instance label either, so they answer at instance All, as every fleet record does.
"""

from __future__ import annotations

from ...rules import load, measured
from ...rules.sources import series
from .reads import Reads
from .selectors import sum_by


class MeasuredQueries(Reads):
    """The speed-up measured against the baseline, and the latencies it is measured from."""

    def _per_server(self) -> str:
        return self.sel.series

    def _per_model(self) -> str:
        return self.sel.series

    def measured_speedup(self) -> str:
        """Per speculative server and model: baseline TPOT / its TPOT."""
        by = (self.cfg.instance_label, "model_name")
        return sum_by(by, series(measured.measured_names(self.cfg).speedup, self._per_server()), op="min")

    def measured_speedup_end_to_end(self) -> str:
        """Per speculative server and model: the baseline's end-to-end latency per output token / its own."""
        by = (self.cfg.instance_label, "model_name")
        return sum_by(by, series(measured.measured_names(self.cfg).speedup_end_to_end, self._per_server()), op="min")

    def measured_server_batch(self) -> str:
        """The running batch (engines summed) of each server that has a measured speed-up."""
        by = (self.cfg.instance_label, "model_name")
        batch = sum_by(by, series(load.load_names(self.cfg).batch, self._per_server()))
        return f"{batch}\nand on ({', '.join(by)})\n{self.measured_speedup()}"

    def baseline_batch(self) -> str:
        """Per model: the baseline servers' running batch."""
        return sum_by(("model_name",), series(measured.measured_names(self.cfg).baseline_batch, self._per_model()),
                      op="max")

    def baseline_tpot(self) -> str:
        """Per model: the baseline servers' mean time per output token."""
        return sum_by(("model_name",), series(measured.measured_names(self.cfg).baseline_tpot, self._per_model()),
                      op="max")

    def server_latency_quantiles(self, itl: bool = False) -> str:
        """Per server, model and quantile: time per output token (or inter-token latency) p50, p90."""
        n = measured.measured_names(self.cfg)
        record = n.itl_quantile if itl else n.tpot_quantile
        return sum_by((self.cfg.instance_label, "model_name", "quantile"), series(record, self._per_server()),
                      op="max")

    def server_latency_mean(self, itl: bool = False) -> str:
        """Per server and model: mean time per output token (or inter-token latency)."""
        n = measured.measured_names(self.cfg)
        record = n.itl_mean if itl else n.tpot_mean
        return sum_by((self.cfg.instance_label, "model_name"), series(record, self._per_server()), op="max")

    def tpot_by_method(self) -> str:
        """Per model and method (`none`: the baseline): mean time per output token."""
        return sum_by(("model_name", "method"),
                      series(measured.measured_names(self.cfg).tpot_by_method, self._per_model()), op="max")
