"""bench/fleet_scale.py's parts, in the order its data flows:

synth (a fleet's series, the real output's shape) -> history (backfill files, the live target) ->
servers (the lab's Prometheus 3 and VictoriaMetrics + vmalert, as the bench runs them) ->
measure (one backend, one fleet size) -> dashboards (panel queries vs raw baselines, the browser) ->
report (summaries and tables). bundle is what is measured: the rules and dashboards of one bundle,
and its records expanded into raw PromQL.

Imported with bench/ on sys.path (the bench is a script, not an installed package)."""
