import torch

model = (
    torch.nn.Sequential(
        torch.nn.Linear(2, 2),  # a comment inside the receiver
    )
    .to(torch.accelerator.current_accelerator())
)
x = torch.zeros(2, device=getattr(torch.accelerator.current_accelerator(), "type", "cuda")).to(torch.accelerator.current_accelerator())  # both: literal and .cuda()
y = x.cuda(1)  # review: an index
z = x.cuda(device=1)  # not rewritten: no faithful .to() spelling
v = x.cuda(weight.device)  # review: a torch.device goes to .to() as it is
u = x.cuda(local_rank)  # review: an index in a variable, as .to() takes it
w = x.to(getattr(torch.accelerator.current_accelerator(), "type", "cuda") + ":0", non_blocking=True)


def make(n, device=getattr(torch.accelerator.current_accelerator(), "type", "cuda")):  # review: the default is evaluated at definition
    return torch.empty(n, device=device)
