"""labcheck: post-deploy validation of the kamaji-hami lab.

Run ``python -m labcheck --help``. The package talks to clusters only through the
``Cluster`` protocol (labcheck.cluster) so every check can be tested against fakes.
"""

__version__ = "0.1.0"

# Every object labcheck creates carries these labels; cleanup deletes by name, and the
# labels let a human (or `kubectl delete -l`) find leftovers of an interrupted run.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "labcheck"
RUN_ID_LABEL = "labcheck.lab/run-id"
CHECK_LABEL = "labcheck.lab/check"
