# torch must be imported before pytester takes its sys.modules snapshot: pytester's in-process runs
# remove modules imported during a run, and torch cannot be imported a second time in one process.
import torch  # noqa: F401

pytest_plugins = ["pytester"]
