import os
import subprocess

os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"  # expect: DA115
visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")  # expect: DA115
subprocess.run(["python", "train.py"], env={"CUDA_VISIBLE_DEVICES": "0"})  # expect: DA115

# Not flagged: other variables, and the name in prose.
os.environ["OMP_NUM_THREADS"] = "1"
print("set CUDA_VISIBLE_DEVICES to pick GPUs")
