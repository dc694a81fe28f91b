"""Profile a batched inference pass: CUDA activity and NVTX ranges only when a GPU is present,
inputs moved with .to("cuda") / .cuda() behind the same check, and the top operators counted."""

import json

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function


class TinyEncoder(nn.Module):
    def __init__(self, vocab=50, width=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.attn = nn.MultiheadAttention(width, num_heads=2, batch_first=True)
        self.out = nn.Linear(width, vocab)

    def forward(self, tokens):
        h = self.embed(tokens)
        h = h + self.attn(h, h, h, need_weights=False)[0]
        return self.out(h)


def activities():
    chosen = [ProfilerActivity.CPU]
    if torch.cuda.is_available():  # expect: DA101
        chosen.append(ProfilerActivity.CUDA)  # expect: DA113
    return chosen


def main():
    torch.manual_seed(13)
    model = TinyEncoder().eval()
    generator = torch.Generator().manual_seed(14)
    tokens = torch.randint(0, 50, (4, 10), generator=generator)
    mask_value = torch.tensor(-1e4)
    if torch.cuda.is_available():  # expect: DA101
        model = model.cuda()  # expect: DA102
        tokens = tokens.to("cuda")  # expect: DA103
        mask_value = mask_value.cuda()  # expect: DA102

    with profile(activities=activities(), record_shapes=False) as prof:
        if torch.cuda.is_available():  # expect: DA101
            torch.cuda.nvtx.range_push("inference")  # expect: DA111
        with torch.no_grad(), record_function("forward"):
            logits = model(tokens)
            logits = torch.where(tokens.unsqueeze(-1) == 0, mask_value, logits)
        if torch.cuda.is_available():  # expect: DA101
            torch.cuda.nvtx.range_pop()  # expect: DA111
        if logits.is_cuda:  # expect: DA106
            torch.cuda.synchronize()  # expect: DA101

    names = {event.key for event in prof.key_averages()}
    print(
        json.dumps(
            {
                "device": logits.device.type,
                "activities": sorted(a.name for a in activities()),
                "recorded_forward": "forward" in names,
                "recorded_linear": any("linear" in name or "addmm" in name for name in names),
                "prediction": logits.argmax(dim=-1).cpu().flatten().tolist(),
                "logits_checksum": round(logits.cpu().abs().sum().item(), 4),
            }
        )
    )


if __name__ == "__main__":
    main()
