"""The shipped suites: ``pytest suites/`` in a checkout, ``pytest --pyargs pytest_gpucomm.suites`` where the
package is installed (the wheel carries this folder as ``pytest_gpucomm.suites``)."""
