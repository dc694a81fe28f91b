import torch

model = torch.nn.Linear(2, 2).cuda()  # expect: DA102
x = torch.zeros(2).cuda(1)  # expect: DA102
y = x.cuda(non_blocking=True)  # expect: DA102

# Not flagged: the module itself, and the generic form.
torch.cuda
z = x.to(torch.accelerator.current_accelerator())
