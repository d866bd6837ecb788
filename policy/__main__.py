"""The kamaji-hami-lab policy pack: `pulumi preview --stack lab --policy-pack policy`."""

from lab_policies import POLICIES
from pulumi_policy import EnforcementLevel, PolicyPack

# Mandatory: a violation fails the preview/update. The credentials policy sets its own level
# (remediate, to observe secrets); its violations are still reported as mandatory.
PolicyPack("kamaji-hami-lab", enforcement_level=EnforcementLevel.MANDATORY, policies=POLICIES)
