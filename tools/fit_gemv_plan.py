#!/usr/bin/env python3
"""Fits the FP8 GEMV's plan cost model (src/backend/cuda/gemv/fp8_gemv.cu: plan_cost_us) to the
H200 measurements of `bench_cuda_gemv RESULTS.json --fit` (every plan, launched as the engine
launches them), and says how well the model's choice does before and after.

    python3 tools/fit_gemv_plan.py RESULTS.json [--table]

--table prints, instead of fitting, fp8_gemv.cu's kMeasuredPlans: the cases where the fastest
measured plan beats the plan the kernel file's model (the constants given in FITTED below)
picks by at least 3 %, as C++ initializer rows.

The model here is plan_cost_us line for line, its constants the parameters. The fit minimizes
the squared log error of the predicted time over every timed plan (each case weighted alike),
from the constants the kernel file has now, with a plain Nelder-Mead (no SciPy needed). Printed:
the fitted constants, and per case the plan each model picks with its measured time against the
fastest measured plan. Only the standard library is used.
"""
import json
import math
import sys

K_CHUNK = 128
K_WARPS = 8
K_ROW_PAD_HALVES = 8
K_SMEM_LIMIT = 110 * 1024

# name, value in fp8_gemv.cu today
DEFAULTS = [
    ("dram_bytes_per_us", 3.8e6),   # DRAM stream rate once enough blocks are resident
    ("resident_per_sm", 1.2),       # blocks per SM for the full DRAM rate
    ("sm_bytes_per_us", 4.0e4),     # one SM's stream rate
    ("smooth_max_power", 4.0),      # the two bounds' smooth maximum
    ("wave_us", 1.5),               # each wave of blocks beyond the first
    ("split_us", 1.5),              # a K split's fence, counter and last-block sum
    ("stage_bytes_per_us", 1.0e5),  # staging x per SM
    ("quant_bytes_per_us", 1.0e30),  # quantize-while-staging: each block's pass over x's rows (new)
]


def cdiv(a, b):
    return (a + b - 1) // b


def smem_bytes(m, chunks, splits, x_group, a8):
    max_len = cdiv(chunks, splits)
    x_stride = max_len * K_CHUNK + K_ROW_PAD_HALVES
    align = lambda v: (v + 15) // 16 * 16
    xsc = align(m * x_stride * 2)
    xc = align(xsc + (m * max_len * 4 if x_group else 0))
    staged = xc + (m * max_len * K_CHUNK if a8 else 0)
    return max(staged, K_WARPS * 16 * 16 * 4), max_len


def cost_us(p, m, n, k, x_group, a8, quant, rt, s, sms):
    dram, res, sm_rate, power, wave, split, stage, quant_rate = p
    chunks = cdiv(k, K_CHUNK)
    if s > 1 and chunks // s < K_WARPS // rt:
        return None
    smem, max_len = smem_bytes(m, chunks, s, x_group, a8)
    if smem > K_SMEM_LIMIT:
        return None
    ctas = cdiv(n, 16 * rt) * s
    cta_bytes = min(n, 16 * rt) * min(k, max_len * K_CHUNK)
    per_sm = math.ceil(ctas / sms)
    resident = min(ctas, 2.0 * sms)
    t_dram = n * k / (dram * min(1.0, resident / (res * sms)))
    t_sm = per_sm * cta_bytes / sm_rate
    t = (t_dram ** power + t_sm ** power) ** (1.0 / power)
    t += wave * (math.ceil(ctas / (2.0 * sms)) - 1)
    if s > 1:
        t += split + 2.0 * s * m * n * 4 / dram
    t += per_sm * m * max_len * K_CHUNK * (1 if a8 else 2) / stage
    if quant:
        t += per_sm * m * k * 2 / quant_rate
    return t


def cases_of(doc):
    out = []
    for c in doc["fit"]:
        plans = [(e["row_tiles"], e["k_splits"], e["us"]) for e in c["plans"]]
        out.append(dict(name=f'{c["shape"]} m={c["m"]} {c["weights"]}', m=c["m"], n=c["n"], k=c["k"],
                        x_group=c["x_group"], a8=c["a8_codes"], quant=c["quantize_x"], plans=plans,
                        auto=tuple(c["auto_plan"]), auto_us=c["auto_us"]))
    return out


def loss(params, cases, sms):
    if any(v <= 0 for v in params) or params[3] < 1.0:
        return 1e9
    total = 0.0
    for c in cases:
        errs = []
        for rt, s, us in c["plans"]:
            t = cost_us(params, c["m"], c["n"], c["k"], c["x_group"], c["a8"], c["quant"], rt, s, sms)
            if t is not None and t > 0:
                errs.append((math.log(t) - math.log(us)) ** 2)
        total += sum(errs) / max(len(errs), 1)
    return total / len(cases)


def nelder_mead(f, x0, steps, iters=4000):
    n = len(x0)
    pts = [list(x0)]
    for i in range(n):
        x = list(x0)
        x[i] *= steps
        pts.append(x)
    vals = [f(x) for x in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centroid = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        worst = pts[-1]
        refl = [centroid[j] + (centroid[j] - worst[j]) for j in range(n)]
        fr = f(refl)
        if fr < vals[0]:
            exp = [centroid[j] + 2 * (centroid[j] - worst[j]) for j in range(n)]
            fe = f(exp)
            pts[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = [centroid[j] + 0.5 * (worst[j] - centroid[j]) for j in range(n)]
            fc = f(con)
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:
                best = pts[0]
                pts = [best] + [[best[j] + 0.5 * (p[j] - best[j]) for j in range(n)] for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    i = min(range(n + 1), key=lambda i: vals[i])
    return pts[i], vals[i]


def choice(params, c, sms, plans=None):
    """The plan the model picks among `plans` (default: the case's measured ones)."""
    best, plan = None, None
    for rt, s in plans if plans is not None else [(rt, s) for rt, s, _ in c["plans"]]:
        t = cost_us(params, c["m"], c["n"], c["k"], c["x_group"], c["a8"], c["quant"], rt, s, sms)
        if t is not None and (best is None or t < best):
            best, plan = t, (rt, s)
    return plan


# The constants fp8_gemv.cu's plan_cost_us has now (this tool's fit, rounded).
FITTED = [4.40e6, 1.56, 1.37e5, 1.0, 2.8, 4.9, 1.87e4, 4.27e4]


def full_choice(params, c, sms):
    """The plan choose_plan picks: every row tiling and every split count up to 64."""
    return choice(params, c, sms, [(rt, s) for rt in (8, 4, 2, 1) for s in range(1, min(cdiv(c["k"], K_CHUNK), 64) + 1)])


def table(doc, sms):
    print(f"// bench_cuda_gemv --fit on {doc.get('device', 'the GPU')} ({int(sms)} SMs), "
          "tools/fit_gemv_plan.py --table: {n, k, m, x_group, a8, quant, row_tiles, k_splits}")
    for c in cases_of(doc):
        measured = {(rt, s): us for rt, s, us in c["plans"]}
        best = min(measured, key=measured.get)
        model = full_choice(FITTED, c, sms)
        model_us = measured.get(model, c["auto_us"])
        if measured[best] <= model_us / 1.03:
            flag = lambda b: "true" if b else "false"
            print(f"    {{{c['n']}, {c['k']}, {c['m']}, {flag(c['x_group'])}, {flag(c['a8'])}, {flag(c['quant'])}, "
                  f"{best[0]}, {best[1]}}},  // {c['name']}: {measured[best]:.1f} vs {model_us:.1f} us")


def main():
    doc = json.load(open(sys.argv[1]))
    sms = float(doc.get("sms", 132))
    if "--table" in sys.argv[2:]:
        return table(doc, sms)
    cases = cases_of(doc)
    x0 = [v for _, v in DEFAULTS]
    x0[-1] = 2.0e5  # start the new term where it matters
    # Fit in log space: the constants span ten orders of magnitude.
    f = lambda lx: loss([math.exp(v) for v in lx], cases, sms)
    lx, val = nelder_mead(f, [math.log(v) for v in x0], 1.3, iters=2500)
    for _ in range(2):  # restarts from the best point
        lx, val = nelder_mead(f, lx, 1.1, iters=1000)
    fitted = [math.exp(v) for v in lx]
    default = [v for _, v in DEFAULTS]
    print(f"log-error loss: default {loss(default, cases, sms):.4f}, fitted {val:.4f}")
    for (name, d), v in zip(DEFAULTS, fitted):
        print(f"  {name:22s} {d:12.5g} -> {v:12.5g}")
    print(f"\n{'case':34s} {'best':>14s} {'default model':>22s} {'fitted model':>22s}")
    worst_d = worst_f = 1.0
    sum_d = sum_f = sum_b = 0.0
    for c in cases:
        measured = {(rt, s): us for rt, s, us in c["plans"]}
        best_plan = min(measured, key=measured.get)
        d, ff = choice(default, c, sms), choice(fitted, c, sms)
        rd, rf = measured[d] / measured[best_plan], measured[ff] / measured[best_plan]
        worst_d, worst_f = max(worst_d, rd), max(worst_f, rf)
        sum_d, sum_f, sum_b = sum_d + measured[d], sum_f + measured[ff], sum_b + measured[best_plan]
        print(f"{c['name']:34s} {str(best_plan):>8s} {measured[best_plan]:5.1f} {str(d):>8s} {measured[d]:5.1f} "
              f"({rd:4.2f}x) {str(ff):>8s} {measured[ff]:5.1f} ({rf:4.2f}x)")
    print(f"\nsum of the chosen plans' times: best {sum_b:.1f} us, default {sum_d:.1f} ({sum_d / sum_b:.3f}x), "
          f"fitted {sum_f:.1f} ({sum_f / sum_b:.3f}x); worst case {worst_d:.2f}x -> {worst_f:.2f}x")
    print("\nfitted constants as JSON: " + json.dumps({n: v for (n, _), v in zip(DEFAULTS, fitted)}))


if __name__ == "__main__":
    main()
