#!/usr/bin/env bash
# Renders deploy/ with kustomize and validates every object against the
# Kubernetes schemas of KUBERNETES_VERSION, offline and strictly (an unknown
# field fails). Two renderings: the base alone, and the base with both
# optional components (monitoring/, network-policy/) in an overlay made
# here, as a user's would be. Then checks the check itself: a misspelt field
# must fail it, and a changed setting must roll the pods.
set -euo pipefail
cd "$(dirname "$0")/.."

# The oldest Kubernetes the manifests support (deploy/README.md says why).
KUBERNETES_VERSION=1.30.0

bin="$(scripts/ensure-deploy-tools.sh)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# An overlay as a user writes one: kustomize wants relative paths.
overlay="$work/overlay"
mkdir -p "$overlay"
base="$(python3 -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$PWD/deploy" "$overlay")"
cat >"$overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: payments
resources:
  - $base
components:
  - $base/monitoring
  - $base/network-policy
YAML

"$bin/kubectl" kustomize deploy >"$work/base.yaml"
"$bin/kubectl" kustomize "$overlay" >"$work/all.yaml"

# Validates one rendering; fails on any error, and on any object it has no
# schema for other than the Prometheus Operator's (their CRDs are not
# Kubernetes'; tests/repo/monitoring.rs checks the PodMonitor instead).
validate() {
  local out
  if ! out="$("$bin/kubernetes-validate" --strict --quiet -k "$KUBERNETES_VERSION" "$1" 2>&1)"; then
    printf '%s\n' "$out" >&2
    return 1
  fi
  if printf '%s\n' "$out" | grep -v 'api version monitoring.coreos.com/v1 ' | grep -q .; then
    printf '%s\n' "$out" >&2
    return 1
  fi
}
for rendering in base all; do
  validate "$work/$rendering.yaml"
  kinds="$(grep -c '^kind:' "$work/$rendering.yaml")"
  echo "deploy: $rendering renders $kinds objects, valid for Kubernetes $KUBERNETES_VERSION"
done

# The check can fail: each misspelt field must be rejected.
for field in revisionHistoryLimit containerPort policyTypes minReplicas; do
  sed "0,/^\([ -]*\)$field:/s//\1${field}x:/" "$work/all.yaml" >"$work/misspelt.yaml"
  if cmp -s "$work/all.yaml" "$work/misspelt.yaml"; then
    echo "deploy: self-test: the rendering has no field $field to misspell" >&2
    exit 1
  fi
  if validate "$work/misspelt.yaml" 2>/dev/null; then
    echo "deploy: self-test: a misspelt $field (${field}x) passed validation" >&2
    exit 1
  fi
done
echo "deploy: self-test: 4 misspelt fields each fail validation"

# configMapGenerator: the Deployment uses the generated name, and a changed
# setting changes it, so applying the change rolls the pods.
configmap_ref() {
  python3 - "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
generated = re.findall(r"(?m)^kind: ConfigMap\n(?:.*\n)*?  name: (sticky-routing-[a-z0-9]{10})$", text)
referenced = re.findall(r"(?m)^ *- configMapRef:\n *name: (\S+)$", text)
if len(generated) != 1 or referenced != generated:
    sys.exit(f"the ConfigMap {generated} is not the one the Deployment uses {referenced}")
print(generated[0])
PY
}
before="$(configmap_ref "$work/base.yaml")"
cp -r deploy "$work/edited"
sed -i 's/^STICKY_ROUTING_MIN_PIN_COUNT=.*/STICKY_ROUTING_MIN_PIN_COUNT=2/' "$work/edited/config.env"
"$bin/kubectl" kustomize "$work/edited" >"$work/edited.yaml"
after="$(configmap_ref "$work/edited.yaml")"
if [ "$before" = "$after" ]; then
  echo "deploy: a changed setting leaves the ConfigMap's name at $before: pods would not roll" >&2
  exit 1
fi
echo "deploy: a changed setting renames the ConfigMap ($before -> $after), so the pods roll"
