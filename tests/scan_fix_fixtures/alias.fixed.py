import torch as t

label = "é ü"; t.accelerator.synchronize()
x = t.zeros(2, device=t.device(t.accelerator.current_accelerator().type, 1))
y = x.to(t.accelerator.current_accelerator())
