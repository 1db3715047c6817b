"""tritnum.torch: a frozen BitLinear (batch 1, 4096 x 4096) against float32 nn.Linear."""


class FrozenBitLinear:
    """Eval-mode BitLinear forward (int8 activations) and nn.Linear on the same weights."""

    params = ["bitlinear", "nn.Linear"]
    param_names = ["layer"]
    timeout = 300

    def setup(self, layer):
        try:
            import torch
        except ImportError:
            raise NotImplementedError("torch is not installed") from None
        from tritnum.torch import BitLinear

        self.torch = torch
        gen = torch.Generator().manual_seed(0)
        dense = torch.nn.Linear(4096, 4096, bias=False)
        with torch.no_grad():
            dense.weight.copy_(torch.randn(4096, 4096, generator=gen))
        self.layer = BitLinear.from_linear(dense).eval() if layer == "bitlinear" else dense
        self.x = torch.randn(1, 4096, generator=gen)
        self.time_forward(layer)  # compiled, weights packed and checked

    def time_forward(self, layer):
        with self.torch.no_grad():
            self.layer(self.x)
