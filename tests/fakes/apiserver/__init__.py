"""A test Kubernetes API server, spoken to over HTTP by the real ``kubernetes`` Python client.

``FakeApiServer`` serves, on 127.0.0.1 and an ephemeral port, exactly the part of
kube-apiserver that dracni uses (``docs/contracts.md`` sections 3-5), with the real response shapes:

- ``resource.k8s.io/v1`` ``resourceclaims`` (namespaced): create, get, list (one namespace or
  all), watch, update (``PUT``, resourceVersion precondition), delete, the ``status``
  subresource (``GET``/``PUT``/``PATCH``).  ``PATCH .../status`` with
  ``application/apply-patch+yaml`` is server-side apply of ``status.devices`` with
  structured-merge-diff's semantics (``smd.py``): a list-map keyed by (driver, device, pool,
  shareID), ``conditions`` a list-map keyed by ``type``, ``networkData`` merged per field with
  ``ips`` atomic, ``data`` atomic; per-field ownership, conflicts, ``force``, removal of what a
  manager stops applying, ``managedFields``; ``application/merge-patch+json`` and
  ``application/strategic-merge-patch+json`` replace the whole ``devices`` list, as the real
  server does.  Status writes go through the status strategy (``claim_status.py``): fields of
  disabled gates dropped, the 1.36 granular authorization (422 ``Forbidden``), and
  ``validateResourceClaimStatusUpdate`` (422), all transcribed from upstream; ``data`` is
  measured on Go's ``json.Marshal`` encoding of it (``gojson.py``), as the server re-encodes it.
- ``resource.k8s.io/v1`` ``resourceslices`` (cluster-scoped): create, get, list, watch, update,
  patch (merge), delete, deletecollection; field selectors ``spec.nodeName``, ``spec.driver``,
  ``metadata.name``; validation of the spec (422).
- ``v1`` ``nodes`` and ``namespaces``: get, list, watch (seeded by the test).
- Custom resources of any ``apiextensions.k8s.io/v1`` CustomResourceDefinition given as a dict
  (``FakeApiServer(crds=[...])``, ``install_crd``/``uninstall_crd``), as apiextensions-apiserver
  serves them: every served version under ``/apis/<group>/<version>``, namespaced or
  cluster-scoped; create (409 ``AlreadyExists``), get, list and watch (label selectors; field
  selectors ``metadata.name``/``metadata.namespace``), update (resourceVersion conflicts), merge
  patch, delete (preconditions), deletecollection, the ``status`` subresource when declared;
  writes pruned of unknown fields (``x-kubernetes-preserve-unknown-fields`` honoured; reported
  as ``fieldValidation`` warnings) and validated against ``openAPIV3Schema`` (422 with upstream's
  field paths and wording; of CEL, only the immutability rule ``self == oldSelf``); ``metadata.generation`` kept; ``Accept: application/json;as=Table;
  v=v1;g=meta.k8s.io`` answers a ``meta.k8s.io/v1`` Table with the ``additionalPrinterColumns``
  (what ``kubectl get`` shows; date columns as ``HumanDuration`` ages).  The garbage collector
  cascades into custom resources too.
- ``k8s.cni.cncf.io/v1alpha1`` ``ipamclaims`` (the Network Plumbing WG's IPAMClaim for sticky
  IPs; only with ``FakeApiServer(ipamclaims=True)``): upstream's CRD
  (``spec/crds/ipamclaims.k8s.cni.cncf.io.yaml``) served through the generic path, plus one rule
  of the fake's own: ``status.ips`` entries are CIDRs.
- Feature gates (``FakeApiServer(feature_gates={...})``, ``set_feature_gate``), defaults of 1.36:
  ``DRAConsumableCapacity`` (on): while it is off, its fields are dropped silently from slices,
  claim specs and claim status, as the registry strategies' ``dropDisabledFields`` do;
  ``DRAResourceClaimDeviceStatus`` (on): while it is off, ``status.devices`` is dropped silently
  unless the claim has entries already; ``DRAResourceClaimGranularStatusAuthorization`` (on): a
  status write that changes a driver's ``status.devices`` entries needs
  ``associated-node:<verb>`` (the caller's token names the allocation's one node:
  ``FakeApiServer(node_name=...)``/``user_extra``) or ``arbitrary-node:<verb>`` on
  ``resourceclaims/driver`` named after the driver, and one that changes ``allocation`` or
  ``reservedFor`` needs the verb on ``resourceclaims/binding``; both are asked of the
  ``authorizer`` hook and refused with 422 ``Forbidden``, as the status strategy does;
  ``DRAListTypeAttributes`` (off, alpha in 1.36 and 1.37): while it is off, list-type attribute
  values are dropped from slices (an attribute left without a value is then refused).
- ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/resource.k8s.io[/v1]``, and each
  installed CRD's ``/apis/<group>[/<version>]`` (short names, categories): discovery.

Every write bumps one global resourceVersion counter; watches replay a bounded event history
(``history_limit``; ``compact()`` drops it) and answer a too-old resourceVersion with an ``ERROR``
event carrying a 410 ``Expired`` Status, as kube-apiserver's watch cache does.

Bearer-token authentication (401), an optional authorizer hook (403), injected failures
(``fail_next``), a request log (``requests``) and ``stop()``/``start()`` (same port, same data)
let tests drive a client through outages and assert exactly what it sent.

Only the standard library and PyYAML are imported (and cel-python, by ``admission.py``, when a
test asks for admission): nothing from ``dracni`` (the double must not share the assumptions of
the code it tests) and no kubernetes client code runs inside the fake.

The package, one job a module:

- ``server.py``: ``FakeApiServer``, assembled from the parts below; construction, lifecycle,
  kubeconfigs.
- HTTP: ``http_layer.py`` (server, handler, request parsing, authentication, the authorizer
  hook, ``fail_next``, the request log, errors as Status answers), ``routes.py`` (paths and the
  routing table), ``discovery.py``, ``errors.py`` (Status errors), ``selectors.py``.
- Store and watch: ``store.py`` (objects, resourceVersion, history), ``watch.py`` (streams, 410
  Expired), ``crud.py`` (the generic verbs, ``DeleteOptions``), ``objects.py`` (JSON helpers,
  body checks), ``gc.py`` (kube-controller-manager's garbage collector: the ownerReference
  cascade on delete, ``propagationPolicy: Orphan``; on unless ``garbage_collector=False``).
- Server-side apply: ``managed_fields.py`` (ownership, ``managedFields``), ``apply.py`` (apply
  bodies, conflicts, ``force``), ``smd.py`` (field sets, merge, prune).
- Resources: ``resources.py`` (the built-in table), ``claims.py``, ``slices.py``, ``core.py``
  (nodes and namespaces), ``events.py``; ``names.py`` (name rules), ``quantity.py``
  (``resource.Quantity``).
- Custom resources: ``crds.py`` (a CRD's served versions and the custom resource strategy;
  ``install_crd``), ``crd_schema.py`` (pruning, OpenAPI validation), ``crd_status.py`` (the
  ``status`` subresource), ``tables.py`` (printer columns as Tables), ``ipamclaims.py`` with
  ``ipamclaim_schema.py`` (the IPAMClaim CRD read from ``spec/crds``, its helpers and extra rule).
- Admission: ``admission.py`` (the ValidatingAdmissionPolicy plugin on cel-python, also used by
  the policy tests; ``FakeApiServer(admission=[policy, binding, ...])``).
- Feature gates: ``features.py`` (the gates; ``DRADeviceTaints`` too, on as from 1.36),
  ``device_taints.py`` (KEP-5055: slice taints defaulted, validated, dropped while the gate is
  off), ``consumable_capacity.py`` (KEP-5075: what is
  dropped while the gate is off, request policy and shareID validation), ``list_attributes.py``
  (KEP-5491: ``ints``/``bools``/``strings``/``versions`` attribute values validated, counted
  against 48 values a device, dropped while ``DRAListTypeAttributes`` is off, as in 1.36-1.37).
- Upstream's shared rules, transcribed: ``field.py`` (apimachinery ``field.Error`` wording),
  ``clock.py`` (``metav1.Time``), ``claim_status.py`` (the claim status strategy: gates,
  authorization, validation), ``gojson.py`` (the bytes of Go's ``json.Marshal``, which ``data``'s
  size is measured on), ``smd.py`` (structured-merge-diff for ``status.devices``).
"""

from __future__ import annotations

from .errors import ApiStatusError
from .http_layer import RecordedRequest, RequestAttributes
from .resources import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH
from .server import FakeApiServer

__all__ = [
    "APPLY_PATCH",
    "JSON_PATCH",
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "ApiStatusError",
    "FakeApiServer",
    "RecordedRequest",
    "RequestAttributes",
]
