"""An independent float64 implementation of docs/model.md, one configuration at a time.

Plain Python floats and the math module only: no JAX, no NumPy, no code shared with the
package, so that it checks the vmapped path rather than repeating it.
"""

from __future__ import annotations

import math

BYTES = {"fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "fp4": 0.5, "int4": 0.5}


def reference_point(gpu: dict, model: dict, tp: int, concurrency: int, think_time_s: float,
                    context_tokens: int, hit_rate: float, osl: float = 128, delta_tokens: float = 2128,
                    eta_prefill: float = 0.65, eta_decode: float = 0.40, overhead: float = 1.10,
                    damping: float = 0.4, tol: float = 1e-6, max_iter: int = 10_000) -> dict:
    """All outputs for one point; ``gpu``/``model`` are plain dicts of the definitions."""
    scale_bits = model.get("weight_scale_bits") or 0.0

    def stored(dtype):  # bytes per weight with group scales on the quantised formats
        return BYTES[dtype] + (scale_bits / 8 if BYTES[dtype] < 2 else 0.0)
    d = stored(model["weight_dtype"])
    d_expert = stored(model.get("expert_weight_dtype") or model["weight_dtype"])
    routed = (model.get("experts_per_token") or 0) * (model.get("expert_params_b") or 0.0)
    # matmuls run at the rate of the dtype holding most active weights
    dtype = (model.get("expert_weight_dtype") or model["weight_dtype"]) if routed > model["nonmoe_params_b"] \
        else model["weight_dtype"]
    fp8 = gpu.get("tflops_fp8")
    fp4 = gpu.get("tflops_fp4")
    if dtype == "fp4":
        flops = fp4 if fp4 else (fp8 if fp8 else gpu["tflops_fp16"])
    elif dtype == "fp8":
        flops = fp8 if fp8 else gpu["tflops_fp16"]
    else:
        flops = gpu["tflops_fp16"]
    kv_width = 1.0 if model.get("kv_dtype") == "fp8" else 2.0
    sliding = model.get("sliding_layers") or 0
    window = model.get("sliding_window") or 0
    state, n_state = 0.0, 1
    if model.get("attention") == "mla":
        kappa = (model["kv_lora_rank"] + model["rope_head_dim"]) * model["layers"] * kv_width
        kappa_window = 0.0
        n_kv = n_kv_window = 1
    elif model.get("layer_groups"):  # hybrid: per group of layers
        groups = model["layer_groups"]
        width = {g_i: (1 if g.get("k_eq_v") else 2) * g.get("kv_heads", 0) * g.get("head_dim", 0) * kv_width * g["count"]
                 for g_i, g in enumerate(groups)}
        kappa = sum(width[i] for i, g in enumerate(groups) if g["attention"] == "full")
        kappa_window = sum(width[i] for i, g in enumerate(groups) if g["attention"] in ("sliding", "chunked"))
        window = max([g.get("window") or 0 for g in groups] + [0])
        state = sum(g["count"] * g.get("state_bytes", 0.0) for g in groups if g["attention"] in ("linear", "mamba"))
        n_state = min([g["state_heads"] for g in groups if g["attention"] in ("linear", "mamba")] + [10**9])
        n_kv = min(g["kv_heads"] for g in groups if g["attention"] == "full")
        n_kv_window = min([g["kv_heads"] for g in groups if g["attention"] in ("sliding", "chunked")] + [n_kv])
    else:
        kappa = 2 * (model["layers"] - sliding) * model["kv_heads"] * model["head_dim"] * kv_width
        kappa_window = 2 * sliding * model["kv_heads"] * model["head_dim"] * kv_width
        n_kv = n_kv_window = model["kv_heads"]

    def seq_kv(tokens):  # KV bytes of one sequence: full layers x T + sliding layers x min(T, window)
        return kappa * tokens + kappa_window * min(tokens, window)
    p_total = model["params_total_b"]
    p_active = model["params_active_b"]
    experts = model.get("experts") or 0
    top_k = model.get("experts_per_token") or 0
    p_expert = model.get("expert_params_b") or 0.0
    p_nonmoe = model["nonmoe_params_b"]
    bw = gpu["bandwidth_gbs"]

    table = model.get("input_embedding_params_b") or 0.0  # untied input table: in memory at 16 bits, not read
    kept = model.get("unquantised_params_b") or 0.0  # non-expert weights a quantised checkpoint keeps 16-bit
    nonmoe_bytes = (p_nonmoe - kept) * d + kept * 2.0
    if experts:
        m_model = nonmoe_bytes + experts * p_expert * d_expert + table * 2.0
    else:
        m_model = (p_total - table - kept) * d + kept * 2.0 + table * 2.0
    m_avail = tp * gpu["memory_gb"] - m_model
    r_kv = tp / min(tp, n_kv)
    window_kv = kappa_window * min(context_tokens, window)  # the sliding layers' heads replicate on their own
    kv_gb = (kappa * context_tokens * r_kv + window_kv * tp / min(tp, n_kv_window) + state * tp / min(tp, n_state)) / 1e9
    c_max = math.floor(max(m_avail, 0.0) / kv_gb)
    c_eff = min(concurrency, c_max)
    # a server's limits: heads split over TP, the turn fits the model's context
    heads, max_context = model.get("attention_heads"), model.get("max_context_tokens")
    layout_ok = (heads is None or heads % tp == 0) and (n_kv % tp == 0 or tp % n_kv == 0) and \
        (n_kv_window % tp == 0 or tp % n_kv_window == 0) and \
        (state == 0 or n_state % tp == 0)
    context_ok = max_context is None or context_tokens + osl <= max_context
    out = {"kv_per_session_gb": kv_gb, "concurrency_max": c_max, "concurrency_eff": c_eff,
           "feasible": layout_ok and context_ok and m_avail > 0 and c_eff >= 1}
    hit = min(max(delta_tokens, 1.0), context_tokens)  # a full hit still computes the prompt's last token
    prefill = hit_rate * hit + (1 - hit_rate) * context_tokens
    out["prefill_tokens"] = prefill
    if not out["feasible"]:
        return out
    ttft = 2 * p_active * 1e9 * prefill / (tp * flops * 1e12) * 1e3 / eta_prefill
    z_ms = think_time_s * 1e3

    def step(b):
        b = max(b, 1.0)  # the mean batch, but a step of one request at least
        if experts:
            t_weight = nonmoe_bytes / (tp * bw) * 1e3 + (min(b * top_k, experts) / tp) * p_expert * d_expert / bw * 1e3
        else:
            t_weight = nonmoe_bytes / (tp * bw) * 1e3
        t_kv = b * (kappa * context_tokens / min(tp, n_kv) + window_kv / min(tp, n_kv_window)
                    + state / min(tp, n_state)) / (bw * 1e9) * 1e3
        t_compute = 2 * p_active * 1e9 * b / (tp * flops * 1e12) * 1e3
        tpot = max((t_weight + t_kv) * overhead, t_compute) / eta_decode
        return t_weight, t_kv, t_compute, tpot

    def target(b):
        r = ttft + step(b)[3] * osl
        return c_eff * r / (r + z_ms)

    b, iterations = 1.0, 0
    t = target(b)
    while abs(t - b) > tol * b and iterations < max_iter:
        b = (1 - damping) * b + damping * t
        t = target(b)
        iterations += 1
    out.update(_step=step, _ms_per_token=ttft / prefill, _kv_bytes_per_token=kappa, _kv_heads=n_kv)
    t_weight, t_kv, t_compute, tpot = step(b)
    latency = ttft + tpot * osl
    turns = c_eff / ((latency + z_ms) / 1e3)
    out.update(
        ttft_ms=ttft, tpot_ms=tpot, latency_ms=latency, batch_eff=b, gpu_active_ratio=latency / (latency + z_ms),
        turns_per_s=turns, output_tokens_per_s_per_user=1e3 / tpot, output_tokens_per_s_per_gpu=turns * osl / tp,
        t_weight_ms=t_weight, t_kv_ms=t_kv, t_compute_ms=t_compute,
        decode_bound=1 if t_compute > (t_weight + t_kv) * overhead else 0,
        converged=abs(t - b) <= tol * b, iterations=iterations,
    )
    return out


def erlang_c(servers: int, offered: float) -> float:
    """P(wait) in M/M/servers with offered load a < servers (the textbook sums)."""
    top = offered ** servers / math.factorial(servers) * servers / (servers - offered)
    return top / (sum(offered ** k / math.factorial(k) for k in range(servers)) + top)


def reference_disaggregated(gpu: dict, model: dict, tp: int, prefill_tp: int, prefill_workers: int,
                            decode_workers: int, concurrency: int, think_time_s: float, context_tokens: int,
                            hit_rate: float, osl: float = 128, delta_tokens: float = 2128, link_gbs: float | None = None,
                            local_prefill_tokens: float | None = None) -> dict:
    """A disaggregated replica of a dense full-attention model (docs/model.md, "Disaggregated
    serving"), from the decode workers' and the prefill workers' aggregated costs: the decode
    batch b per decode worker solved by bisection in float64. ``local_prefill_tokens`` given:
    conditional disaggregation."""
    per_worker = concurrency / decode_workers  # below 1 with fewer sessions than decode workers
    decode = reference_point(gpu, model, tp, max(per_worker, 1), think_time_s, context_tokens, hit_rate, osl,
                             delta_tokens)
    prefill = reference_point(gpu, model, prefill_tp, 1, think_time_s, context_tokens, hit_rate, osl, delta_tokens)
    feasible = decode["feasible"] and prefill["feasible"]
    out = {"feasible": feasible}
    if not feasible:
        return out
    sessions = min(per_worker, decode["concurrency_max"])
    kinds = [(hit_rate, min(max(delta_tokens, 1.0), context_tokens)), (1 - hit_rate, context_tokens)]
    local = [t <= local_prefill_tokens if local_prefill_tokens is not None else False for _, t in kinds]

    def mix(weights_times):
        total = sum(w for w, _ in weights_times)
        if total == 0:
            return 0.0, 0.0, 0.0
        mean = sum(w * t for w, t in weights_times) / total
        return total, mean, sum(w * t * t for w, t in weights_times) / total / mean ** 2 - 1

    q, s_local, scv_local = mix([(w, t * decode["_ms_per_token"]) for (w, t), lo in zip(kinds, local) if lo])
    _, s_remote, scv_remote = mix([(w, t * prefill["_ms_per_token"]) for (w, t), lo in zip(kinds, local) if not lo])
    _, remote_tokens, _ = mix([(w, t) for (w, t), lo in zip(kinds, local) if not lo])
    if link_gbs is None:
        gpus = prefill_workers * prefill_tp + decode_workers * tp
        link_gbs = gpu["interconnect_gbs"] if gpus <= gpu["scaleup_domain_gpus"] else \
            min(gpu["interconnect_gbs"], gpu["scaleout_gbs"])
    kappa, n_kv = decode["_kv_bytes_per_token"], decode["_kv_heads"]
    held = remote_tokens * kappa * tp / min(tp, n_kv)  # as the decode GPUs hold it, copies included
    per_gpu = max(held / g for g in (tp, prefill_tp)) / 1e9
    transfer = per_gpu / link_gbs * 1e3
    z_ms = think_time_s * 1e3

    def turn(b):
        tpot0 = decode["_step"](b)[3]
        x = b / (osl * tpot0 + b * q * s_local)
        rho_local = x * q * s_local
        tpot = tpot0 / (1 - rho_local)
        ttft = 0.0
        # the arrival theorem: a turn sees the other sessions' load, (n - 1) / n of it
        # (C(P, a') S / (P - a): the wait at the others' load a', diverging at the whole load a)
        if q > 0:
            seen = rho_local * (1 - 1 / max(sessions, 1))
            ttft += q * (seen * s_local * (1 + scv_local) / 2 / (1 - rho_local) + s_local)
        if q < 1:
            offered = x * decode_workers * (1 - q) * s_remote
            if offered >= prefill_workers:
                return tpot, math.inf
            seen = offered * (1 - 1 / max(sessions * decode_workers, 1))
            wait = erlang_c(prefill_workers, seen) * s_remote / (prefill_workers - offered) * (1 + scv_remote) / 2
            ttft += (1 - q) * (wait + s_remote + transfer)
        return tpot, ttft

    def excess(b):
        tpot, ttft = turn(b)
        return b - sessions * osl * tpot / (ttft + osl * tpot + z_ms)

    lo, hi = 0.0, float(sessions)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) < 0 else (lo, mid)
    b = 0.5 * (lo + hi)
    tpot, ttft = turn(b)
    latency = sessions * osl * tpot / b - z_ms  # the fixed point's own R: well conditioned when saturated
    turns = decode_workers * sessions / ((latency + z_ms) / 1e3)
    out.update(ttft_ms=latency - osl * tpot, tpot_ms=tpot, latency_ms=latency, batch_eff=b * decode_workers,
               turns_per_s=turns, output_tokens_per_s_per_gpu=turns * osl / (prefill_workers * prefill_tp
                                                                             + decode_workers * tp),
               concurrency_eff=round(sessions * decode_workers), transfer_ms=transfer)
    return out
