"""The strings of the Flux and gating APIs, verbatim, in one place."""

GATING_GROUP = "gating.toolkit.fluxcd.io"
GATING_VERSION = "v1alpha1"
GATING_API_VERSION = f"{GATING_GROUP}/{GATING_VERSION}"
GATE_KIND = "Gate"
GATEKEEPER_KIND = "GateKeeper"
GATE_PLURAL = "gates"
GATEKEEPER_PLURAL = "gatekeepers"

# Toggles on a Gate, and who asked and why.
OPEN_ANNOTATION = "open.gate.fluxcd.io/requestedAt"
CLOSE_ANNOTATION = "close.gate.fluxcd.io/requestedAt"
MESSAGE_ANNOTATION = f"{GATING_GROUP}/message"
REQUESTED_BY_ANNOTATION = f"{GATING_GROUP}/requestedBy"

# On Flux objects.
GATES_ANNOTATION = f"{GATING_GROUP}/gates"
REQUIRE_ANNOTATION = f"{GATING_GROUP}/require"
AUDIT_ANNOTATION = f"{GATING_GROUP}/audit"
SUSPEND_DURING_ANNOTATION = "reconcile.fluxcd.io/suspendDuring"
SUSPENDED_DURING_ANNOTATION = "reconcile.fluxcd.io/suspendedDuring"  # RFC-0006 spelling
SUSPENDED_ANNOTATION = "reconcile.fluxcd.io/suspended"
RECONCILE_REQUEST_ANNOTATION = "reconcile.fluxcd.io/requestedAt"
KUSTOMIZE_NAME_LABEL = "kustomize.toolkit.fluxcd.io/name"
KUSTOMIZE_NAMESPACE_LABEL = "kustomize.toolkit.fluxcd.io/namespace"

REQUIRE_ALL = "all"
REQUIRE_ONE_OF = "oneOf"

KUSTOMIZE_GROUP = "kustomize.toolkit.fluxcd.io"
HELM_GROUP = "helm.toolkit.fluxcd.io"
SOURCE_GROUP = "source.toolkit.fluxcd.io"

# Kubernetes' own deleters: a namespace being deleted must never hang on a gate.
SYSTEM_DELETERS = frozenset({
    "system:serviceaccount:kube-system:namespace-controller",
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:kube-controller-manager",
})


# Conditions the mutating webhook writes on held Flux objects (issue 13), and their reason.
BLOCKED_CONDITION = "Blocked"  # sources and ImagePolicy: status "True" while held
APPROVED_CONDITION = "Approved"  # Kustomization, HelmRelease: status "False" while held
GATE_CLOSED_REASON = "GateClosed"
