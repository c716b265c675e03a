# Starts busy.py as a child process with the same interpreter, then waits for it.
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
child = subprocess.Popen([sys.executable, os.path.join(here, "busy.py"), sys.argv[1]], stdout=subprocess.PIPE, universal_newlines=True)
assert child.stdout.readline().strip() == "ready"
print("ready", child.pid, flush=True)
child.wait()
