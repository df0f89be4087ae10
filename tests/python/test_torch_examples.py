#!/usr/bin/env python3
# tests/python/test_torch_examples.py: the examples of PyTorch's tensor-view
# documentation and tutorials (views sharing storage, slicing offsets, strides
# after transpose, contiguous() making a new storage, view() refused on a
# non-contiguous tensor, set_ with a cloned zeroed storage, the bytes of
# ones(3)) run once on torch and once on mnemo, as the same code over a
# namespace, and must print the same lines ("torch." read as "mnemo.").
"""Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_torch_examples.py
(exit 0 pass, 1 fail, 77 skip: numpy or torch missing). Label cpu."""
import sys
import unittest

try:
    import numpy  # noqa: F401
    import torch
except ImportError:
    print("SKIPPED: numpy or torch is not installed")
    sys.exit(77)

import mnemo


def untyped(t):
    """The tensor's untyped storage (torch 1.13 has no Tensor.untyped_storage())."""
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    return t.storage().untyped()


def run(example, X):
    """The lines ``example`` prints with ``X`` (torch or mnemo) as its library."""
    out = []

    def p(*args):
        out.append(" ".join(str(a) for a in args).replace("torch.storage.", "mnemo.").replace("torch.", "mnemo."))
    example(X, p)
    return out


# ---- the examples (docs: tensor_view.html, storage.html, the tensor tutorials) --------------
def views_share_storage(X, p):
    t = X.tensor([[float(4 * i + j) for j in range(4)] for i in range(4)])
    b = t.view(2, 8)
    p(untyped(t).data_ptr() == untyped(b).data_ptr())  # t and b share the same underlying data
    b[0][0] = 3.14  # modifying the view changes the base as well
    p(t[0][0])
    p(t)
    p(b)


def transpose_strides_and_contiguous(X, p):
    base = X.tensor([[0, 1], [2, 3]])
    p(base.is_contiguous(), base.stride())
    t = base.transpose(0, 1)  # a view of base: no data movement
    p(t.is_contiguous(), t.stride(), untyped(t).data_ptr() == untyped(base).data_ptr())
    c = t.contiguous()  # copies: t is not contiguous
    p(c.is_contiguous(), c.stride(), untyped(c).data_ptr() == untyped(base).data_ptr())
    p(t)
    p(c)
    c2 = base.contiguous()  # already contiguous: the tensor itself
    p(untyped(c2).data_ptr() == untyped(base).data_ptr())


def slicing_offsets(X, p):
    x = X.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    for y in (x[1:], x[1:, 1:], x[:, 2], x[2, 1:], x.t()[1:], x.narrow(1, 1, 2)):
        p(tuple(y.shape), y.stride(), y.storage_offset(), untyped(y).data_ptr() == untyped(x).data_ptr())
        p(y)
    y = x[1:, 1:]
    y.fill_(0)
    p(x)


def view_refused_when_not_contiguous(X, p):
    t = X.tensor([[0, 1], [2, 3]]).transpose(0, 1)
    try:
        t.view(-1)
    except RuntimeError as e:
        p("RuntimeError:", "view size is not compatible with input tensor's size and stride" in str(e),
          "Use .reshape(...) instead." in str(e))
    r = t.reshape(-1)
    p(r, untyped(r).data_ptr() == untyped(t).data_ptr())
    p(X.tensor([[0, 1], [2, 3]]).view(-1))


def bytes_of_ones(X, p):
    t = X.ones(3)
    s = untyped(t)
    p(s.tolist())
    nbytes = t.nbytes if hasattr(t, "nbytes") else t.numel() * t.element_size()  # (torch 1.13: no Tensor.nbytes)
    p(t, t.dtype, t.element_size(), nbytes)
    p(s)


def set_with_cloned_zeroed_storage(X, p):
    t = X.ones(3)
    s1 = untyped(t).clone()
    s1.fill_(0)
    r = t.set_(s1, storage_offset=t.storage_offset(), stride=t.stride(), size=t.size())
    p(r is t, t)


def printing(X, p):
    p(X.tensor([1.5, 2.25, 1e-5]))
    p(X.tensor([[1, 2], [3, 4]], dtype=X.int32))
    p(X.tensor([True, False]))
    p(X.tensor(7.0))
    p(X.zeros(2, 3, dtype=X.float16))
    p(X.tensor([1 + 2j]))
    p(X.ones(0, 2))


EXAMPLES = [views_share_storage, transpose_strides_and_contiguous, slicing_offsets,
            view_refused_when_not_contiguous, bytes_of_ones, printing]


class TorchExamples(unittest.TestCase):
    def test_same_output(self):
        for ex in EXAMPLES:
            with self.subTest(example=ex.__name__):
                self.assertEqual(run(ex, mnemo), run(ex, torch))

    def test_set_(self):
        self.assertEqual(run(set_with_cloned_zeroed_storage, mnemo), run(set_with_cloned_zeroed_storage, torch))


if __name__ == "__main__":
    unittest.main()
