import torch as t

label = "é ü"; t.cuda.synchronize()
x = t.zeros(2, device="cuda:1")
y = x.cuda()
