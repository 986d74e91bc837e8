"""Measurements: benchmark-log metrics, the validation set, validation and calibration.

- `records` reads per-request logs (CSV, JSONL, DataFrame) and checks every record, with
  `values` (one column's numbers, flags and lists), `text_files` (UTF-8 text, CSV, JSONL, JSON)
  and `log_formats` (vLLM ``bench serve`` and GuideLLM result files).
- `metrics`: TTFT, TPOT, ITL, E2EL statistics, throughput and goodput of a log.
- `validation_set`: the published measurements the model is checked against.
- `row_inputs` (the rows as arrays) and `predict` (the model's prediction of each row, a JAX
  function of the efficiency factors); `validate`: the comparison table and its MAPE.
- `calibrate`: fitting the efficiency factors; `calibration_file`: the TOML that holds them.

Argument parsing and printing live in `jaxpareto.cli`.
"""
