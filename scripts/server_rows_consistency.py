"""Do the validation set's server rows fit in KV memory at their request lengths?

A server row logs a load X (output tokens/s of the whole system) and a mean TPOT. By Little's law
over the decode phase, a replica then decodes B = (X / replicas) x TPOT requests at once, and each
holds its KV for the request's in-flight context (ISL + OSL (1 + cv_OSL^2) / 2 on average, as the
validation evaluates the rows: `jaxpareto.physics.memory.in_flight_context`). The model's KV
memory per replica holds ``concurrency_max`` such contexts (the offline row of the same system:
as many sessions as memory admits). Where B exceeds it, the row's input length (or parallelism,
or KV dtype) cannot be what the system ran: the last column is the mean ISL at which B would
fit.

Prints one markdown row per server TPOT row that has an offline row of the same system. No fit,
no model of time: Little's law and the memory model only. About 20 s on a 2-core CPU.

Usage: python scripts/server_rows_consistency.py
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import jaxpareto as jp
from jaxpareto.physics.memory import in_flight_context
from _common import markdown_table


def replicas(row: pd.Series) -> float:
    """Replicas of a row's system: GPUs / (TP x attention DP x PP)."""
    def factor(value) -> float:
        return float(value) if str(value) not in ("", "nan") else 1.0
    return row["gpus"] / (row["tp"] * factor(row["attention_dp"]) * factor(row["pp"]))


def main() -> None:
    rows = jp.load_validation_set()
    table = jp.validate(rows, options=jp.ModelOptions(prefill_model="shared")).set_index("id")
    server = rows[rows["load"].eq("server") & rows["metric"].eq("tpot_ms")]
    out = []
    for _, row in server.iterrows():
        offline = row["id"].split("-server")[0] + "-offline"
        if offline not in table.index:
            continue
        slots = float(table.loc[offline, "concurrency"])  # sessions KV memory admits per replica
        batch = row["load_tokens_per_s"] / replicas(row) * row["value"] / 1000.0
        osl_cv = 0.0 if pd.isna(row["osl_cv"]) else row["osl_cv"]
        context = in_flight_context(row["isl"], row["osl"], osl_cv)
        fitting_isl = slots * context / batch - (context - row["isl"])
        out.append([row["id"].removesuffix("-server-tpot"), f"{row['isl']:.0f}", f"{row['osl']:.0f}",
                    f"{row['load_tokens_per_s'] / replicas(row):,.0f}", f"{row['value']:.1f}", f"{batch:,.0f}",
                    f"{slots:,.0f}", "yes" if batch <= slots else "no",
                    f"{fitting_isl:,.0f}" if batch > slots else ""])
    print(markdown_table(["server row", "ISL", "OSL", "output tokens/s per replica", "TPOT ms",
                          "implied batch B", "KV slots (model)", "fits", "mean ISL that would fit"], out))
    print(f"\n{sum(r[7] == 'no' for r in out)} of {len(out)} rows imply more requests decoding than KV memory holds "
          "at their request lengths.")


if __name__ == "__main__":
    np.set_printoptions(suppress=True)
    main()
