"""Training steps of real model architectures on neuron vs the CPU, eager and compiled, in one run.

Models (small sizes, float32), each trained with AdamW pinned to ``foreach=False`` on both
devices (torch's default differs: foreach on accelerators, off on the CPU):

- ``gpt``: the architecture of karpathy/llm.c's ``train_gpt2.py`` (GPT-2: learned positions,
  pre-LayerNorm blocks, causal self-attention written out with a mask, tanh GELU, tied
  embedding and head), written here from that public definition; 2 layers, 64 wide, 4 heads,
  vocabulary 256, batch 4 x 64 tokens.
- ``llama``: transformers' ``LlamaForCausalLM`` from a ``LlamaConfig`` (2 layers, 64 wide,
  4 heads, 2 key/value heads, vocabulary 256; transformers' default attention, SDPA), batch
  4 x 64 tokens. Needs transformers (pinned in requirements.txt); skipped without.
- ``resnet18``: ResNet-18 (He et al. 2015: BasicBlocks [2, 2, 2, 2], 64-512 channels, batch
  norm), written from its public definition since torchvision does not import beside torch
  2.13's wheel; 10 classes, batch 2 x 3 x 32 x 32.
- ``unet``: a small U-Net (two down and two up levels, 16-64 channels, batch norm, transposed
  convolutions, skip connections), MSE to a target image, batch 2 x 3 x 32 x 32.

Method: each model is built once on the CPU from a fixed seed and copied to each device. For
``compiled``, ``torch.compile(model)`` is called per device (fresh dynamo state, inductor's
caches off so that the second device cannot reuse the first one's kernels); the first training
step (forward and backward compilation) is timed on its own, wall clock, as ``compile_s`` (the
CPU first, then neuron, one dynamo state for both), and steps 2-3 as ``warm_step_ms``;
``graphs_compiled_after_first_steps`` counts the dynamo graphs compiled after both devices'
first steps, to the end of the rounds (a model that recompiles shows there), ``graph_breaks``
those of the first steps. Then
``--rounds`` interleaved rounds: each times a block of steps on each device, alternating which
goes first; a block has as many steps as make about ``--block-seconds`` on the slower device,
the same count on both. A block's time is this process's CPU time (all its threads,
``time.process_time``), which other processes on a shared machine barely move, with
``--threads 1`` by default (with several threads on a busy machine, OpenMP's waiting
dominates); ``wall_ratio`` is the wall-clock ratio beside it. ``ratio`` is the median of the
rounds' neuron/CPU ratios (below 1: neuron is faster); ``step_ms`` each device's median
per-step CPU time. The first steps' losses of both devices are compared (a warning above
1e-3). The run reports the load: the share of the machine's CPUs other processes used
(``/proc/stat``) and the load average.

``--no-layout-optimization`` turns inductor's layout optimization off on both devices, for
comparison; with it on (the default), neuron's convolution returns the layout torch's fake kernel
predicts for an out-of-tree device (contiguous), so compiled convolution models run.

Usage:
    python benchmarks/neuron_models.py [--models gpt,llama,resnet18,unet] [--modes eager,compiled]
        [--rounds 7] [--block-seconds 0.2] [--threads 1] [--no-layout-optimization] [--json PATH]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch._dynamo
import torch._inductor.config
import torch.nn.functional as F
from torch import nn

DEVICES = ("cpu", "neuron")


# --- GPT: llm.c's train_gpt2.py architecture --------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, context: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        mask = torch.tril(torch.ones(context, context, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, context, context), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        q, k, v = (t.view(batch, tokens, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        scores = scores.masked_fill(~self.mask[:, :, :tokens, :tokens], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).contiguous().view(batch, tokens, width))


class GPTBlock(nn.Module):
    def __init__(self, width: int, heads: int, context: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = CausalSelfAttention(width, heads, context)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, layers: int, width: int, heads: int) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, width)
        self.position_embedding = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(GPTBlock(width, heads, context) for _ in range(layers))
        self.final_norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.token_embedding.weight = self.head.weight  # tied, as in GPT-2

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.size(1), device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.final_norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# --- ResNet-18 ----------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = (
            nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs)
            )
            if stride != 1 or inputs != outputs
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        stages, inputs = [], 64
        for outputs, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages += [BasicBlock(inputs, outputs, stride), BasicBlock(outputs, outputs, 1)]
            inputs = outputs
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(512, classes)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        features = F.adaptive_avg_pool2d(self.stages(self.stem(images)), 1).flatten(1)
        return F.cross_entropy(self.fc(features), labels)


# --- U-Net --------------------------------------------------------------------------------------


def conv_block(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(inputs, outputs, 3, padding=1),
        nn.BatchNorm2d(outputs),
        nn.ReLU(),
        nn.Conv2d(outputs, outputs, 3, padding=1),
        nn.BatchNorm2d(outputs),
        nn.ReLU(),
    )


class UNet(nn.Module):
    def __init__(self, channels: int = 3, width: int = 16) -> None:
        super().__init__()
        self.down1 = conv_block(channels, width)
        self.down2 = conv_block(width, 2 * width)
        self.bottom = conv_block(2 * width, 4 * width)
        self.up2 = nn.ConvTranspose2d(4 * width, 2 * width, 2, stride=2)
        self.merge2 = conv_block(4 * width, 2 * width)
        self.up1 = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.merge1 = conv_block(2 * width, width)
        self.out = nn.Conv2d(width, channels, 1)

    def forward(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        skip1 = self.down1(images)
        skip2 = self.down2(F.max_pool2d(skip1, 2))
        x = self.bottom(F.max_pool2d(skip2, 2))
        x = self.merge2(torch.cat([self.up2(x), skip2], dim=1))
        x = self.merge1(torch.cat([self.up1(x), skip1], dim=1))
        return F.mse_loss(self.out(x), targets)


# --- Llama from transformers --------------------------------------------------------------------


class LlamaLoss(nn.Module):
    """transformers' LlamaForCausalLM, returning its loss as the other models do."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=256,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
        )
        self.model = LlamaForCausalLM(config)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=tokens, labels=targets).loss


# --- the benchmark ------------------------------------------------------------------------------


@dataclass
class Case:
    build: Callable[[], nn.Module]
    batch: Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]]


def token_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, 256, (4, 64), generator=generator)
    return tokens, torch.randint(0, 256, (4, 64), generator=generator)


def image_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(2, 3, 32, 32, generator=generator), torch.randint(
        0, 10, (2,), generator=generator
    )


def image_pair(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(2, 3, 32, 32, generator=generator), torch.randn(
        2, 3, 32, 32, generator=generator
    )


CASES = {
    "gpt": Case(lambda: GPT(vocab=256, context=64, layers=2, width=64, heads=4), token_batch),
    "llama": Case(LlamaLoss, token_batch),
    "resnet18": Case(lambda: ResNet18(classes=10), image_batch),
    "unet": Case(UNet, image_pair),
}


class Trainee:
    """One model on one device with its optimizer and batch: ``step()`` is one training step."""

    def __init__(
        self, model: nn.Module, batch: tuple[torch.Tensor, ...], device: str, compiled: bool
    ):
        self.device = device
        self.model = copy.deepcopy(model).to(device)
        self.batch = tuple(t.to(device) for t in batch)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, foreach=False)
        self.forward = torch.compile(self.model) if compiled else self.model

    def step(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward(*self.batch)
        loss.backward()
        self.optimizer.step()
        return loss

    def timed_steps(self, count: int) -> tuple[float, float]:
        """Wall time and this process's CPU time (all its threads) of ``count`` steps."""
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(count):
            self.step()
        if self.device != "cpu":
            torch.accelerator.synchronize()
        return time.perf_counter() - wall, time.process_time() - cpu


class OthersLoad:
    """Share of all CPUs that other processes used: /proc/stat busy time minus ours."""

    def __init__(self) -> None:
        self.start = self.sample()

    @staticmethod
    def sample() -> tuple[float, float, float]:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return time.perf_counter(), busy, usage.ru_utime + usage.ru_stime

    def share(self) -> float:
        (t0, busy0, own0), (t1, busy1, own1) = self.start, self.sample()
        return max(0.0, ((busy1 - busy0) - (own1 - own0)) / ((t1 - t0) * os.cpu_count()))


def dynamo_graphs() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def graph_breaks() -> int:
    return sum(torch._dynamo.utils.counters["graph_break"].values())


def measure(name: str, mode: str, rounds: int, block_seconds: float) -> dict:
    case = CASES[name]
    torch.manual_seed(0)
    model = case.build()
    batch = case.batch(torch.Generator().manual_seed(1))
    compiled = mode == "compiled"
    result: dict = {"model": name, "mode": mode}
    trainees = {}
    first_loss = {}
    compile_s, warm_s = {}, {}
    # One dynamo state for both devices, as in a program that trains both: a reset between them
    # would drop the first device's compiled code, and its next step would compile again.
    torch._dynamo.reset()
    for device in DEVICES:
        trainees[device] = Trainee(model, batch, device, compiled)
        start = time.perf_counter()
        first_loss[device] = trainees[device].step().item()
        compile_s[device] = time.perf_counter() - start
    graphs_after_first_steps = dynamo_graphs()
    breaks = graph_breaks()
    for device in DEVICES:
        warm_s[device] = trainees[device].timed_steps(2)[1] / 2
    if abs(first_loss["neuron"] - first_loss["cpu"]) > 1e-3:
        print(f"warning: {name} {mode}: first losses differ {first_loss}", file=sys.stderr)
    slower = max(warm_s.values())
    steps = max(1, round(block_seconds / slower))
    ratios, wall_ratios, per_step = [], [], {d: [] for d in DEVICES}
    for index in range(rounds):
        wall, cpu = {}, {}
        for device in DEVICES if index % 2 == 0 else DEVICES[::-1]:
            wall[device], cpu[device] = trainees[device].timed_steps(steps)
            per_step[device].append(cpu[device] / steps)
        ratios.append(cpu["neuron"] / cpu["cpu"])
        wall_ratios.append(wall["neuron"] / wall["cpu"])
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    result.update(
        ratio=round(statistics.median(ratios), 3),
        ratio_quartiles=[round(quartiles[0], 3), round(quartiles[2], 3)],
        wall_ratio=round(statistics.median(wall_ratios), 3),
        step_ms={d: round(statistics.median(per_step[d]) * 1e3, 2) for d in DEVICES},
        steps_per_block=steps,
        first_step_s={d: round(compile_s[d], 2) for d in DEVICES},
        warm_step_ms={d: round(warm_s[d] * 1e3, 2) for d in DEVICES},
        graphs_compiled_after_first_steps=dynamo_graphs() - graphs_after_first_steps,
        graph_breaks=breaks,
        first_loss=first_loss,
    )
    if compiled:
        result["compile_s"] = result.pop("first_step_s")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt,llama,resnet18,unet")
    parser.add_argument("--modes", default="eager,compiled")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--block-seconds", type=float, default=0.2)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads on both devices (default 1)"
    )
    parser.add_argument(
        "--no-layout-optimization",
        action="store_true",
        help="inductor's layout_optimization off on both devices (for comparison)",
    )
    parser.add_argument("--json", help="write the results and the machine's description here")
    args = parser.parse_args()
    models = args.models.split(",")
    unknown = [m for m in models if m not in CASES]
    if unknown:
        parser.error(f"unknown model(s) {unknown}: choose from {', '.join(CASES)}")
    if "llama" in models:
        try:
            import transformers  # noqa: F401
        except ImportError:
            print(
                "llama skipped: transformers is not installed (pinned in requirements.txt)",
                file=sys.stderr,
            )
            models.remove("llama")
    torch.set_num_threads(args.threads)
    torch._dynamo.config.cache_size_limit = 64
    load = OthersLoad()
    results = []
    inductor_settings = {"force_disable_caches": True}
    if args.no_layout_optimization:
        inductor_settings["layout_optimization"] = False
    with torch._inductor.config.patch(inductor_settings):
        for mode in args.modes.split(","):
            for name in models:
                try:
                    result = measure(name, mode, args.rounds, args.block_seconds)
                except Exception as error:  # a failing model must not hide the others' figures
                    message = str(error).splitlines()[0] if str(error) else ""
                    result = {
                        "model": name,
                        "mode": mode,
                        "error": f"{type(error).__name__}: {message}",
                    }
                results.append(result)
                print(json.dumps(result), flush=True)
    summary = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "torch_threads": torch.get_num_threads(),
        "others_cpu_share": round(load.share(), 2),
        "loadavg": os.getloadavg(),
        "torch": torch.__version__,
        "inductor_layout_optimization": not args.no_layout_optimization,
    }
    print(json.dumps(summary))
    print(
        f"{'model':9} {'mode':9} {'neuron/cpu':>10} {'cpu ms':>8} {'neuron ms':>9}"
        "  compile s cpu/neuron"
    )
    for r in results:
        if "error" in r:
            print(f"{r['model']:9} {r['mode']:9} failed: {r['error'][:120]}")
            continue
        compile_text = (
            f"{r['compile_s']['cpu']:.1f} / {r['compile_s']['neuron']:.1f}"
            if "compile_s" in r
            else ""
        )
        print(
            f"{r['model']:9} {r['mode']:9} {r['ratio']:10.3f} {r['step_ms']['cpu']:8.2f}"
            f" {r['step_ms']['neuron']:9.2f}  {compile_text}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"summary": summary, "results": results}, out, indent=1)


if __name__ == "__main__":
    main()
