import torch as t

label = "é ü"; t.accelerator.synchronize()
x = t.zeros(2, device=getattr(t.accelerator.current_accelerator(), "type", "cuda") + ":1")
y = x.to(t.accelerator.current_accelerator())
