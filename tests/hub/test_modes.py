"""The bundled kernels in kernels' three modes: inference, training (autograd) and torch.compile.

Every op must pass `torch.library.opcheck` (schema, autograd registration, fake kernel, AOT
tracing with dynamic shapes); its gradients must be as accurate as eager autograd's against a
float64 run of the same formula (the kernels have no float64 path, so this float64 reference check
stands in for `gradcheck`); it must trace under torch.compile with fullgraph=True and run there;
and what has no backward (the out= forms, the fused backward's own backward) must say so instead of
returning a result without a gradient path. Model-level checks through `kernelize` are in
test_bundled.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from test_kernels import ACTIVATIONS, DTYPES, _inputs, apply_rotary_pos_emb
from transformers.models.llama.modeling_llama import LlamaRMSNorm

UNARY = ("silu", "gelu", "gelu_tanh", "gelu_new", "gelu_fast", "gelu_quick")


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_()


def _grads(fn: Callable, inputs: list[torch.Tensor], grads_out: list[torch.Tensor]) -> list[torch.Tensor]:
    """d(sum(out_i * grad_i)) / d(inputs) for fn(*inputs), through autograd."""
    leaves = [_leaf(t) for t in inputs]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(outs, [g.to(o.dtype) for o, g in zip(outs, grads_out, strict=True)])
    return [leaf.grad for leaf in leaves]


def _assert_grad_accuracy(kernel: torch.Tensor, eager: torch.Tensor, exact: torch.Tensor, what: str) -> None:
    """The kernel's gradient is no further from float64's than twice eager's (or a rounding)."""
    assert kernel.dtype == eager.dtype and kernel.shape == eager.shape, what
    if exact.numel() == 0:
        return
    err_kernel = (kernel.double() - exact).abs().max().item()
    err_eager = (eager.double() - exact).abs().max().item()
    floor = torch.finfo(eager.dtype).eps * exact.abs().max().item()
    assert err_kernel <= 2 * max(err_eager, floor), (what, err_kernel, err_eager)


def _rms_norm_eager(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LlamaRMSNorm's forward on a given weight tensor (so the weight can be any dtype or a leaf)."""
    dtype = x.dtype
    h = x.to(torch.float32 if dtype != torch.float64 else dtype)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


# ---------------------------------------------------------------------------------------------
# opcheck: every op, every dtype


def _opcheck_cases(hub: dict, dtype: torch.dtype) -> list[tuple[str, object, tuple]]:
    """(name, op, args) for every op of the three repositories, functional forms with inputs that
    require grad, out= forms and the fused backward ops without (they have no backward)."""
    act, rms, rot = hub["activation"].ops, hub["rmsnorm"].ops, hub["rotary"].ops
    x = _inputs((3, 5, 34), dtype, 2.0)
    w = _inputs((34,), dtype, 1.0)
    q, k = _inputs((2, 4, 5, 16), dtype, 1.0), _inputs((2, 2, 5, 16), dtype, 1.0)
    cos, sin = _inputs((2, 5, 16), dtype, 1.0), _inputs((2, 5, 16), dtype, 1.0)
    grad = [_leaf(t) for t in (x, w, q, k, cos, sin)]
    cases: list[tuple[str, object, tuple]] = []
    for name in UNARY:
        cases.append((name, getattr(act, name), (grad[0],)))
        cases.append((name + "_out", getattr(act, name + "_out"), (torch.empty_like(x), x)))
    cases += [
        ("silu_and_mul", act.silu_and_mul, (grad[0],)),
        ("silu_and_mul_out", act.silu_and_mul_out, (torch.empty(3, 5, 17, dtype=dtype), x)),
        ("silu_and_mul_backward", act.silu_and_mul_backward, (_inputs((3, 5, 17), dtype), x)),
        ("rms_norm", rms.rms_norm, (grad[0], grad[1], 1e-6)),
        ("rms_norm[float32 weight]", rms.rms_norm, (grad[0], _leaf(w.float()), 1e-6)),
        ("rms_norm_out", rms.rms_norm_out, (torch.empty_like(x), x, w, 1e-6)),
        ("rms_norm_backward", rms.rms_norm_backward, (x.clone(), x, w, 1e-6, True)),
        ("rms_norm_backward[no dw]", rms.rms_norm_backward, (x.clone(), x, w, 1e-6, False)),
        ("apply_rotary", rot.apply_rotary, (*grad[2:], 1)),
        ("apply_rotary[q, k only]", rot.apply_rotary, (grad[2], grad[3], cos, sin, 1)),
        ("apply_rotary[dim 2]", rot.apply_rotary, (_leaf(q.transpose(1, 2)), k.transpose(1, 2), cos, sin, 2)),
        (
            "apply_rotary_out",
            rot.apply_rotary_out,
            (torch.empty_like(q), torch.empty_like(k), q, k, cos, sin, 1),
        ),
    ]
    return cases


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_passes_for_every_op(hub: dict, dtype: torch.dtype) -> None:
    """PyTorch's own custom-op checks: the schema tells the truth about mutation and aliasing, an
    autograd formula is registered, the fake kernel agrees with the real one (shapes, dtypes,
    strides), and AOTAutograd traces forward and backward with dynamic shapes to the same values."""
    for name, op, args in _opcheck_cases(hub, dtype):
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, (name, result)


def test_every_autograd_kernel_is_registered_from_cpp(hub: dict) -> None:
    """A Python autograd formula (torch.library.register_autograd) runs Python on every call of
    the op, about 9 us, more than the kernel on one token (bench/call_overhead.py): every op's
    Autograd kernel comes from its repository's torch_binding.cpp instead."""
    for name, op, _ in _opcheck_cases(hub, torch.float32):
        dump = torch._C._dispatch_dump(op.default.name()).splitlines()
        autograd = [line for line in dump if line.startswith("Autograd[alias]:")]
        assert len(autograd) == 1 and "torch_binding.cpp" in autograd[0], (name, autograd)


# ---------------------------------------------------------------------------------------------
# Gradients: against eager autograd and a float64 reference, on every compiled ISA path


def _grad_shapes(dtype: torch.dtype) -> list[torch.Tensor]:
    """Lengths off the vector width, one row, zero rows, non-contiguous views, several threads."""
    return [
        _inputs((1, 2), dtype),
        _inputs((3, 34), dtype),
        _inputs((2, 3, 98), dtype),
        _inputs((0, 8), dtype),
        _inputs((40, 34), dtype).t(),
        _inputs((6, 200), dtype)[:, ::2],
        _inputs((300, 130), dtype),  # 39,000 elements: split over threads
    ]


# Ops whose eager gradient is a chain of autograd steps, each rounded to the input dtype: in 16 bits
# that chain is further from float64 than the kernel's (computed in float32, rounded once), so
# there only the accuracy check applies.
_EAGER_GRAD_IS_A_16_BIT_CHAIN = {"gelu_new", "gelu_fast", "gelu_quick"}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", [*UNARY, "silu_and_mul"])
def test_activation_gradients(hub: dict, isa: str, op: str, dtype: torch.dtype) -> None:
    """Close to eager's gradient, and as accurate against float64 (or more)."""
    fn, ref = getattr(hub["activation"], op), ACTIVATIONS[op]
    compare_with_eager = dtype == torch.float32 or op not in _EAGER_GRAD_IS_A_16_BIT_CHAIN
    for x in _grad_shapes(dtype):
        out_shape = (*x.shape[:-1], x.shape[-1] // 2) if op == "silu_and_mul" else x.shape
        g = _inputs(out_shape, dtype, 1.0)
        (got,), (want,) = _grads(fn, [x], [g]), _grads(ref, [x], [g])
        (exact,) = _grads(ref, [x.double()], [g.double()])
        if compare_with_eager:
            torch.testing.assert_close(got, want, msg=lambda m, x=x: f"{op} {tuple(x.shape)}: {m}")
        _assert_grad_accuracy(got, want, exact, f"{op} {tuple(x.shape)}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("weight_dtype", ["same", torch.float32], ids=str)
def test_rmsnorm_gradients(hub: dict, isa: str, dtype: torch.dtype, weight_dtype) -> None:
    """dx close to eager's; dx and dw as accurate as eager's against float64. The fused backward
    sums dw in float32 where eager rounds every product to a 16-bit dtype first, so for 16-bit
    weights only the accuracy is checked for dw (it is closer to float64 than eager's)."""
    wdt = dtype if weight_dtype == "same" else weight_dtype

    def kernel(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return hub["rmsnorm"].rms_norm(x, w, 1e-5)

    for x in _grad_shapes(dtype):
        w = _inputs((x.shape[-1],), wdt, 1.0)
        out_dtype = dtype if wdt == dtype else torch.float32
        g = _inputs(x.shape, out_dtype, 1.0)
        got, want = _grads(kernel, [x, w], [g]), _grads(_rms_norm_eager, [x, w], [g])
        exact = _grads(_rms_norm_eager, [x.double(), w.double()], [g.double()])
        tol = {} if dtype == torch.float32 else {"rtol": 2 * torch.finfo(dtype).eps, "atol": 1e-3}
        torch.testing.assert_close(got[0], want[0], **tol)
        if wdt == torch.float32:
            torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-4)
        for name, k, e, x64 in zip(("dx", "dw"), got, want, exact, strict=True):
            _assert_grad_accuracy(k, e, x64, f"{name} {tuple(x.shape)}")


def test_rmsnorm_frozen_weight_computes_no_weight_gradient(hub: dict) -> None:
    """A norm whose weight does not require grad (LoRA, frozen layers) skips the dw reduction."""
    x, w = _leaf(_inputs((4, 96), torch.float32)), _inputs((96,), torch.float32, 1.0)
    hub["rmsnorm"].rms_norm(x, w, 1e-6).sum().backward()
    assert w.grad is None and x.grad is not None
    dx, dw = hub["rmsnorm"].ops.rms_norm_backward(torch.ones(4, 96), x.detach(), w, 1e-6, False)
    assert dw.shape == (0,)
    torch.testing.assert_close(dx, x.grad)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_gradients(hub: dict, isa: str, dtype: torch.dtype) -> None:
    """dq, dk from the forward kernel run on the gradients (with sin transposed) match eager's;
    dcos, dsin (when asked for) come from the eager formula."""
    apply = hub["rotary"].apply_rotary
    for b, h, kv, s, d, dim in [(1, 4, 2, 7, 64, 1), (2, 3, 3, 5, 6, 1), (1, 2, 1, 3, 34, 2)]:
        q_shape, k_shape = ((b, h, s, d), (b, kv, s, d)) if dim == 1 else ((b, s, h, d), (b, s, kv, d))
        q, k = _inputs(q_shape, dtype, 1.0), _inputs(k_shape, dtype, 1.0)
        cos, sin = _inputs((b, s, d), dtype, 1.0), _inputs((b, s, d), dtype, 1.0)
        gq, gk = _inputs(q_shape, dtype, 1.0), _inputs(k_shape, dtype, 1.0)

        def kernel(q, k, cos, sin, dim=dim):
            return apply(q, k, cos, sin, dim)

        def eager(q, k, cos, sin, dim=dim):
            return apply_rotary_pos_emb(q, k, cos, sin, dim)

        got = _grads(kernel, [q, k, cos, sin], [gq, gk])
        want = _grads(eager, [q, k, cos, sin], [gq, gk])
        exact = _grads(eager, [t.double() for t in (q, k, cos, sin)], [gq.double(), gk.double()])
        for name, g, w, e in zip(("dq", "dk", "dcos", "dsin"), got, want, exact, strict=True):
            torch.testing.assert_close(g, w, msg=lambda m, name=name: f"{name}: {m}")
            _assert_grad_accuracy(g, w, e, name)
        # q and k only (the usual case): cos and sin get no gradient
        q_leaf, k_leaf = _leaf(q), _leaf(k)
        dq_only = torch.autograd.grad(apply(q_leaf, k_leaf, cos, sin, dim), (q_leaf, k_leaf), (gq, gk))
        torch.testing.assert_close(dq_only, tuple(want[:2]))


# ---------------------------------------------------------------------------------------------
# What has no backward says so


@pytest.mark.parametrize(
    ("repo", "call"),
    [
        ("activation", lambda m, x: m.silu(x, out=torch.empty_like(x))),
        ("activation", lambda m, x: m.silu_and_mul(x, out=torch.empty(2, 4, 2))),
        ("rmsnorm", lambda m, x: m.rms_norm(x, torch.ones(4), 1e-6, out=torch.empty_like(x))),
        (
            "rotary",
            lambda m, x: m.apply_rotary(
                x[None], x[None], x[:1], x[:1], out=(torch.empty(1, 2, 4, 4), torch.empty(1, 2, 4, 4))
            ),
        ),
    ],
)
def test_out_forms_refuse_inputs_that_require_grad(hub: dict, repo: str, call) -> None:
    """An out= call records no graph: with an input that requires grad it raises, naming the
    functional form; under no_grad it runs and bumps the output's version like ATen's out= ops."""
    x = torch.ones(2, 4, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"out= form has no backward.*functional form"):
        call(hub[repo], x)
    with torch.no_grad():
        result = call(hub[repo], x)
    first = result[0] if isinstance(result, tuple) else result
    assert first._version > 0 and not first.requires_grad


def test_fused_backwards_refuse_double_backward(hub: dict) -> None:
    x, w = _leaf(_inputs((3, 8), torch.float32)), _leaf(_inputs((8,), torch.float32))
    (dx,) = torch.autograd.grad(hub["rmsnorm"].rms_norm(x, w, 1e-6).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        dx.sum().backward()
    (dx,) = torch.autograd.grad(hub["activation"].silu_and_mul(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        dx.sum().backward()
    # the unary activations' composite backward is differentiable again
    (dx,) = torch.autograd.grad(hub["activation"].gelu_tanh(x).sum(), x, create_graph=True)
    (ddx,) = torch.autograd.grad(dx.sum(), x)
    xr = _leaf(x)
    (dxr,) = torch.autograd.grad(ACTIVATIONS["gelu_tanh"](xr).sum(), xr, create_graph=True)
    torch.testing.assert_close(ddx, torch.autograd.grad(dxr.sum(), xr)[0])


# ---------------------------------------------------------------------------------------------
# torch.compile


def _layer(hub: dict, repo: str, cls: str, **attributes: object) -> torch.nn.Module:
    layer = getattr(hub[repo].layers, cls)()
    for name, value in attributes.items():
        setattr(layer, name, value)
    return layer


def test_every_layer_traces_in_one_graph_with_its_op(hub: dict) -> None:
    """fullgraph=True: no graph break in any layer class, and the graph calls the kernel's op
    (not a fallback), for forward and backward (AOTAutograd traces the backward through the
    fake kernels of the backward ops)."""
    x = _leaf(_inputs((2, 5, 32), torch.float32))
    weight = torch.nn.Parameter(torch.ones(32))
    cases = [(_layer(hub, "rmsnorm", "RMSNorm", weight=weight, variance_epsilon=1e-6), "rms_norm", (x,))]
    activations = {"Silu": "silu", "SiluAndMul": "silu_and_mul", "Gelu": "gelu", "GeluTanh": "gelu_tanh",
                   "NewGELU": "gelu_new", "FastGELU": "gelu_fast", "QuickGELU": "gelu_quick"}  # fmt: skip
    for cls, op in activations.items():
        cases.append((_layer(hub, "activation", cls), op, (x,)))
    q, k = _leaf(_inputs((1, 4, 5, 16), torch.float32)), _leaf(_inputs((1, 2, 5, 16), torch.float32))
    cos, sin = _inputs((1, 5, 16), torch.float32), _inputs((1, 5, 16), torch.float32)
    cases.append((_layer(hub, "rotary", "apply_rotary_transformers"), "apply_rotary", (q, k, cos, sin)))
    for layer, op, args in cases:
        assert type(layer).has_backward and type(layer).can_torch_compile
        seen: set[str] = set()

        def record(gm: torch.fx.GraphModule, example_inputs: list, seen: set = seen):
            seen.update(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
            return gm.forward

        torch._dynamo.reset()
        out = torch.compile(layer, backend=record, fullgraph=True)(*args)
        kernel_ops = {n.replace("::", ".").split(".")[1] for n in seen if n.startswith("_") and "_cpu_" in n}
        assert op in kernel_ops, (op, seen)
        eager = layer(*args)
        torch.testing.assert_close(out, eager)
        aot = torch.compile(layer, backend="aot_eager", fullgraph=True)(*args)
        outs = aot if isinstance(aot, tuple) else (aot,)
        leaves = [a for a in args if a.requires_grad]
        got = torch.autograd.grad(sum(o.sum() for o in outs), leaves)
        eager_outs = eager if isinstance(eager, tuple) else (eager,)
        want = torch.autograd.grad(sum(o.sum() for o in eager_outs), leaves)
        torch.testing.assert_close(got, want)


# ---------------------------------------------------------------------------------------------
# kernels-community's rmsnorm test suite (huggingface kernels-community/rmsnorm,
# tests/test_rmsnorm.py), ported: the same three tests, run on the bundled build's
# `rmsnorm.layers.RMSNorm` as loaded by kernels (the original imports the installed package and
# picks an XPU when there is one; here it is always this CPU build).


@pytest.fixture
def RMSNorm(hub: dict) -> type[torch.nn.Module]:
    return hub["rmsnorm"].layers.RMSNorm


def test_kernels_community_rmsnorm(RMSNorm) -> None:
    x = torch.randn(1024, 1024, dtype=torch.bfloat16)
    rmsnorm_layer = RMSNorm()
    rmsnorm_layer.weight = torch.randn(1024, dtype=torch.bfloat16)
    rmsnorm_layer.variance_epsilon = 1e-6
    output = rmsnorm_layer(x)

    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + rmsnorm_layer.variance_epsilon)
    ref_out = x * rmsnorm_layer.weight
    torch.testing.assert_close(output, ref_out.to(torch.bfloat16))


def _reference_backward(x, weight, eps, grad_output):
    x_ref, w_ref = x.detach().requires_grad_(), weight.detach().requires_grad_()
    x_norm = x_ref * torch.rsqrt(x_ref.pow(2).mean(-1, keepdim=True) + eps)
    ref_out = w_ref * x_norm
    ref_out.backward(grad_output)
    return ref_out, x_ref.grad, w_ref.grad


def test_kernels_community_rmsnorm_backward(RMSNorm) -> None:
    x = torch.randn(1024, 1024, dtype=torch.float32, requires_grad=True)
    rmsnorm_layer = RMSNorm()
    rmsnorm_layer.weight = torch.randn(1024, dtype=torch.float32, requires_grad=True)
    rmsnorm_layer.variance_epsilon = 1e-6
    output = rmsnorm_layer(x)
    grad_output = torch.randn_like(output)
    output.backward(grad_output)

    _, x_grad, w_grad = _reference_backward(x, rmsnorm_layer.weight, 1e-6, grad_output.detach())
    torch.testing.assert_close(x.grad, x_grad, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(rmsnorm_layer.weight.grad, w_grad, atol=1e-2, rtol=1e-2)


def test_kernels_community_rmsnorm_compile(RMSNorm) -> None:
    rmsnorm_layer = RMSNorm()
    rmsnorm_layer.weight = torch.randn(1024, dtype=torch.float32, requires_grad=True)
    rmsnorm_layer.variance_epsilon = 1e-6

    x = torch.randn(1024, 1024, dtype=torch.float32, requires_grad=True)
    grad_output = torch.randn_like(x)

    torch._dynamo.reset()
    compiled_rmsnorm = torch.compile(rmsnorm_layer, backend="inductor", fullgraph=True)

    output = compiled_rmsnorm(x)
    output.backward(grad_output)

    ref_out, x_grad, w_grad = _reference_backward(x, rmsnorm_layer.weight, 1e-6, grad_output)
    torch.testing.assert_close(output, ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x.grad, x_grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(rmsnorm_layer.weight.grad, w_grad, atol=1e-4, rtol=1e-4)


def test_llama_rmsnorm_reference_is_the_eager_helper() -> None:
    """_rms_norm_eager (used above with weights of other dtypes) is LlamaRMSNorm's formula."""
    norm = LlamaRMSNorm(40, eps=1e-5)
    norm.weight.data = _inputs((40,), torch.bfloat16, 1.0)
    x = _inputs((3, 40), torch.bfloat16)
    assert torch.equal(norm(x), _rms_norm_eager(x, norm.weight, 1e-5))
