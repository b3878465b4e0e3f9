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

# A Gate's status: its state, its condition, the condition's reasons, and the controller's Events.
STATE_OPENED = "Opened"
STATE_CLOSED = "Closed"
OPENED_CONDITION = "Opened"
REASON_DEFAULT = "Default"
REASON_SCHEDULED = "Scheduled"
REASON_OPEN_REQUESTED = "OpenRequested"
REASON_CLOSE_REQUESTED = "CloseRequested"
REASON_INVALID = "Invalid"
REASON_NOT_FOUND = "NotFound"
REASON_UNKNOWN = "Unknown"  # the gate cache cannot be trusted
GATE_OPENED_EVENT = "GateOpened"
GATE_CLOSED_EVENT = "GateClosed"  # also a denied change, on the held object

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


# Kubernetes' own strings: what `kubectl apply` records, and the groups the API server adds.
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
AUTHENTICATED_GROUP = "system:authenticated"
ANONYMOUS_USER = "system:anonymous"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"

# Conditions the mutating webhook writes on held Flux objects (issue 13), and their reason.
BLOCKED_CONDITION = "Blocked"  # sources and ImagePolicy: status "True" while held
APPROVED_CONDITION = "Approved"  # Kustomization, HelmRelease: status "False" while held
GATE_CLOSED_REASON = GATE_CLOSED_EVENT  # the same word on a held object's condition and its Event
