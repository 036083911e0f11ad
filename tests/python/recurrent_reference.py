"""The ONNX RNN, GRU and LSTM in plain numpy (float64), one batch row and one step at a
time, straight from the spec: every attribute, sequence_lens (idle steps carry the state
and leave Y zero), layout 0 and 1. An oracle for what onnxruntime does not run (layout 1,
float64 RNN) and a readable statement of the semantics the kernels implement."""

from __future__ import annotations

import numpy as np

ACTIVATIONS = {
    "relu": lambda x, a, b: np.maximum(x, 0),
    "tanh": lambda x, a, b: np.tanh(x),
    "sigmoid": lambda x, a, b: 1 / (1 + np.exp(-x)),
    "affine": lambda x, a, b: a * x + b,
    "leakyrelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "thresholdedrelu": lambda x, a, b: np.where(x > a, x, 0),
    "scaledtanh": lambda x, a, b: a * np.tanh(b * x),
    "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "elu": lambda x, a, b: np.where(x >= 0, x, a * (np.exp(np.minimum(x, 0)) - 1)),
    "softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "softplus": lambda x, a, b: np.log1p(np.exp(x)),
}
# (uses alpha, uses beta, default alpha, default beta), as onnxruntime reads them
PARAMS = {
    "affine": (True, True, 0.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 0.0, 0.0),
    "scaledtanh": (True, True, 0.0, 0.0),
    "hardsigmoid": (True, True, 0.2, 0.5),
    "elu": (True, False, 1.0, 0.0),
}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
PER_DIRECTION = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def activation_functions(cell: str, attrs: dict, directions: int):
    names = list(attrs.get("activations", PER_DIRECTION[cell]))
    if len(names) == len(PER_DIRECTION[cell]) and directions == 2:
        names = names * 2
    alphas = list(attrs.get("activation_alpha", []))
    betas = list(attrs.get("activation_beta", []))
    out = []
    for name in names:
        key = name.lower()
        uses_a, uses_b, a, b = PARAMS.get(key, (False, False, 0.0, 0.0))
        if uses_a and alphas:
            a = float(np.float32(alphas.pop(0)))
        if uses_b and betas:
            b = float(np.float32(betas.pop(0)))
        out.append(lambda x, f=ACTIVATIONS[key], a=a, b=b: f(x, a, b))
    per = len(PER_DIRECTION[cell])
    return [out[d * per : (d + 1) * per] for d in range(directions)]


def recurrent(cell: str, inputs: dict, attrs: dict) -> list[np.ndarray]:
    """Y, Y_h (and Y_c for LSTM) of the op on `inputs` (X, W, R, B, sequence_lens,
    initial_h, initial_c, P; None where omitted)."""
    layout = attrs.get("layout", 0)
    x = inputs["X"].astype(np.float64)
    if layout == 1:
        x = x.transpose(1, 0, 2)
    seq, batch, _ = x.shape
    w, r = inputs["W"].astype(np.float64), inputs["R"].astype(np.float64)
    directions, gh, _ = w.shape
    g = GATES[cell]
    hidden = gh // g
    bias = inputs.get("B")
    bias = np.zeros((directions, 2 * gh)) if bias is None else bias.astype(np.float64)
    lens = inputs.get("sequence_lens")
    lens = np.full(batch, seq) if lens is None else lens
    state = lambda name: (  # noqa: E731
        np.zeros((directions, batch, hidden))
        if inputs.get(name) is None
        else (inputs[name].transpose(1, 0, 2) if layout == 1 else inputs[name]).astype(np.float64)
    )
    h0, c0 = state("initial_h"), state("initial_c")
    p = inputs.get("P")
    p = np.zeros((directions, 3 * hidden)) if p is None else p.astype(np.float64)
    clip = attrs.get("clip")
    clip_f = (lambda v: v) if clip is None else (lambda v: np.clip(v, -np.float32(clip), np.float32(clip)))
    direction = attrs.get("direction", "forward")
    acts = activation_functions(cell, attrs, directions)
    y = np.zeros((seq, directions, batch, hidden))
    yh = np.zeros((directions, batch, hidden))
    yc = np.zeros((directions, batch, hidden))
    H = hidden
    for d in range(directions):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        f = acts[d][0]
        g_act = acts[d][1] if len(acts[d]) > 1 else None
        h_act = acts[d][2] if len(acts[d]) > 2 else None
        wb, rb = bias[d, :gh], bias[d, gh:]
        for b in range(batch):
            h, c = h0[d, b].copy(), c0[d, b].copy()
            n = int(lens[b])
            for step in range(n):
                t = n - 1 - step if reverse else step
                xt = x[t, b]
                if cell == "RNN":
                    h = f(clip_f(w[d] @ xt + r[d] @ h + wb + rb))
                elif cell == "GRU":
                    xw = w[d] @ xt + wb
                    z = f(clip_f(xw[:H] + r[d, :H] @ h + rb[:H]))
                    rr = f(clip_f(xw[H : 2 * H] + r[d, H : 2 * H] @ h + rb[H : 2 * H]))
                    if attrs.get("linear_before_reset", 0):
                        pre = xw[2 * H :] + rr * (r[d, 2 * H :] @ h + rb[2 * H :])
                    else:
                        pre = xw[2 * H :] + r[d, 2 * H :] @ (rr * h) + rb[2 * H :]
                    ht = g_act(clip_f(pre))
                    h = (1 - z) * ht + z * h
                else:
                    pre = w[d] @ xt + r[d] @ h + wb + rb
                    pi, po, pf = p[d, :H], p[d, H : 2 * H], p[d, 2 * H :]
                    i = f(clip_f(pre[:H] + pi * c))
                    fg = 1 - i if attrs.get("input_forget", 0) else f(clip_f(pre[2 * H : 3 * H] + pf * c))
                    cc = g_act(clip_f(pre[3 * H :]))
                    c = fg * c + i * cc
                    o = f(clip_f(pre[H : 2 * H] + po * c))
                    h = o * h_act(c)
                y[t, d, b] = h
            yh[d, b], yc[d, b] = h, c
    dtype = inputs["X"].dtype
    if layout == 1:
        y, yh, yc = y.transpose(2, 0, 1, 3), yh.transpose(1, 0, 2), yc.transpose(1, 0, 2)
    outs = [y, yh] + ([yc] if cell == "LSTM" else [])
    return [o.astype(dtype) for o in outs]
