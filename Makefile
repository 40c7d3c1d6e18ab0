# jaild — see README.md. Every target that needs root says so.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Go: the first of PATH's, /usr/local/go's and our own that is 1.26 or
# newer; with none, `make deps` fetches the exact version go.mod names from
# the Go module proxy (a stock Debian or Ubuntu server has no Go 1.26).
GO_VERSION := $(shell sed -n 's/^go //p' go.mod)
GO_CACHE   ?= /var/cache/jaild/go
GO_BOOT    := $(GO_CACHE)/go$(GO_VERSION)/bin/go
GO        ?= $(shell for g in $$(command -v go) /usr/local/go/bin/go $(GO_BOOT); do [ -x $$g ] && $$g version 2>/dev/null | grep -qE ' go1\.(2[6-9]|[3-9][0-9])' && { echo $$g; exit; }; done; echo $(GO_BOOT))
# An older 1.26.x switches to go.mod's version through the module proxy.
export GOTOOLCHAIN ?= auto
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
# Seccomp in libcontainer needs cgo and the seccomp tag; a binary built
# without them refuses to start a jail (internal/seccomp fails closed).
TAGS      := seccomp
BUILDFLAGS := -trimpath -tags $(TAGS)
LDFLAGS   := -X github.com/jaild/jaild/internal/version.Version=$(VERSION)
export CGO_ENABLED := 1
# sudo's secure_path usually lacks Go; tests also call `go build`.
export PATH := $(dir $(GO)):$(PATH)

ROOTFS_CACHE ?= /var/cache/jaild/rootfs
IMAGE_DIR    ?= $(ROOTFS_CACHE)/current
SOCKET       ?= /run/jaild/jaild.sock
PREFIX       ?= /usr/local

# Host packages: cgo's libseccomp and the jail's init (a static C program),
# the rootfs builder, systemd's helpers, the egress tests' upstream namespace.
APT_PACKAGES := gcc libc6-dev libseccomp-dev pkg-config mmdebstrap debootstrap squashfs-tools systemd curl unzip iproute2
# The Debian package and the systemd + cgroup v2 test VM.
VM_PACKAGES  := dpkg-dev fakeroot lintian qemu-system-x86 qemu-utils e2fsprogs
# What test-host needs besides: Debian's Chromium, which tests/web_test.go
# drives (playwright-core) through the web playground, and HAProxy, the load
# balancer in front of tests/fleet_test.go's three daemons; Debian's Python
# with venv, pip, setuptools and wheel, into which tests/clients_test.go
# installs clients/python offline.
TEST_PACKAGES := chromium haproxy python3 python3-venv python3-pip python3-setuptools python3-wheel

.PHONY: help deps vm-deps test-deps kube-tools web build rootfs rootfs-images groups test test-host test-unit vet lint fuzz run install deb vm-test mcp-conformance soak security-report bench bench-engine clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

deps: ## install host packages (root; Debian/Ubuntu), and a CRIU new enough for paused sessions into /var/cache/jaild/criu (deploy/criu/fetch.sh)
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@if ! [ -x "$(GO)" ]; then \
		arch=$$(dpkg --print-architecture); mod=golang.org/toolchain@v0.0.1-go$(GO_VERSION).linux-$$arch; \
		echo "no Go 1.26 found: fetching $$mod from the Go module proxy into $(GO_CACHE)"; \
		mkdir -p $(GO_CACHE) && rm -rf $(GO_CACHE)/.fetch && mkdir $(GO_CACHE)/.fetch && \
		curl -fsSL --retry 3 -o $(GO_CACHE)/.fetch/go.zip "$${GOPROXY_URL:-https://proxy.golang.org}/golang.org/toolchain/@v/v0.0.1-go$(GO_VERSION).linux-$$arch.zip" && \
		unzip -q $(GO_CACHE)/.fetch/go.zip -d $(GO_CACHE)/.fetch && \
		chmod -R a+rX,u+w $(GO_CACHE)/.fetch/$$mod && chmod a+x $(GO_CACHE)/.fetch/$$mod/bin/* $(GO_CACHE)/.fetch/$$mod/pkg/tool/*/* && \
		rm -rf $(GO_CACHE)/go$(GO_VERSION) && mv $(GO_CACHE)/.fetch/$$mod $(GO_CACHE)/go$(GO_VERSION) && rm -rf $(GO_CACHE)/.fetch && \
		$(GO_BOOT) version; \
	fi
	@bash deploy/criu/fetch.sh >/dev/null

vm-deps: deps ## install what make deb and make vm-test need (root; Debian/Ubuntu)
	@missing=$$(for p in $(VM_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

test-deps: deps ## install what make test-host needs besides deps: Chromium for the playground's browser test, HAProxy for the fleet test (root; Debian/Ubuntu)
	@missing=$$(for p in $(TEST_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# A real kube-apiserver (k8s.io/kubernetes from the Go module proxy, built:
# ~6 min on 2 cores the first time), etcd and kubectl (Debian trixie's packages,
# unpacked, not installed) for deploy/kubernetes/test's server-side dry run,
# cached in /var/cache/jaild/kube/<version>-<recipe digest> (JAILD_KUBE_CACHE)
# so that no test waits for the build. tests/kubernetes_test.go finds them.
kube-tools: deps ## build kube-apiserver and fetch etcd and kubectl for the Kubernetes dry-run test, once (cached outside the checkout)
	GO=$(GO) bash deploy/kubernetes/test/kube/fetch.sh

web: ## rebuild the playground's page internal/web/dist from internal/web/ui (npm ci + esbuild; node >= 20, else fetched from the npm registry)
	bash internal/web/ui/build.sh

build: deps ## build bin/jaild, bin/jailctl and bin/jailbench
	$(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

rootfs: deps ## build the default Python rootfs image, python (root; a no-op when the recipe is unchanged)
	bash rootfs/build.sh --cache-dir $(ROOTFS_CACHE)

rootfs-images: deps ## build every image of rootfs/images: python, python-minimal, python-ml (root; each a no-op when unchanged)
	bash rootfs/build.sh --cache-dir $(ROOTFS_CACHE) all

vet: lint ## gofmt, go vet (also as test-unit builds: a root test without its !unit tag breaks it) and golangci-lint (.golangci.yml)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet $(BUILDFLAGS) ./...
	$(GO) vet -trimpath -tags $(TAGS),unit $$($(GO) list ./... | grep -Ev '$(ROOT_PKGS)')

# golangci-lint, built once per version from the module proxy and kept
# outside the checkout.
GOLANGCI_VERSION := v2.15.0
GOLANGCI         := $(GO_CACHE)/tools/golangci-lint-$(GOLANGCI_VERSION)

$(GOLANGCI):
	@mkdir -p $(GO_CACHE)/tools/.build
	GOBIN=$(GO_CACHE)/tools/.build $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	mv $(GO_CACHE)/tools/.build/golangci-lint $@

lint: deps $(GOLANGCI) ## the style rules of .golangci.yml: import grouping, errorlint, the layering (depguard; its deliberate violations must be refused), package docs
	$(GOLANGCI) run ./...
	bash tests/lint/layering.sh $(GOLANGCI)

# Every package but those that need root and real daemons (tests, and
# tests/vm/guest, which runs inside the VM guest), built with the unit tag:
# it leaves out internal/jail's and internal/run's files of tests that need
# root and an image (`//go:build !unit`), and their pure tests run. test-host
# builds without it: every test, a root test that cannot run failing.
ROOT_PKGS := /tests$$|/tests/vm/guest$$

test-unit: ## every test that needs neither root nor the rootfs, fuzz seeds included
	$(GO) test -trimpath -tags $(TAGS),unit -count=1 $$($(GO) list ./... | grep -Ev '$(ROOT_PKGS)')

test: test-host vm-test ## every test: the host's (real jails), then the systemd + cgroup v2 VM's (root)

test-host: deps test-deps kube-tools rootfs rootfs-images vet ## the tests on this host: real jails and daemons, the runner, MCP conformance, every fuzz target briefly (root)
	JAILD_IMAGE_DIR=$(IMAGE_DIR) JAILD_IMAGES_DIR=$(ROOTFS_CACHE) $(GO) test $(BUILDFLAGS) -count=1 -timeout 30m ./...
	bash rootfs/test.sh $(IMAGE_DIR)
	$(MAKE) --no-print-directory mcp-conformance
	$(MAKE) --no-print-directory fuzz

# A budget in executions, not seconds: Go 1.26's fuzz coordinator can fail a
# target with "context deadline exceeded" when a time budget ends while a
# worker is mid-call (go.dev/issue/75804, fixed in Go 1.27).
FUZZTIME ?= 30000x

fuzz: ## run every fuzz target briefly (FUZZTIME=30000x executions each)
	@for t in $$(grep -rl --include='*_test.go' '^func Fuzz' internal cmd); do \
		pkg=./$$(dirname $$t); for f in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$t | cut -d' ' -f2); do \
			echo "fuzz $$pkg $$f"; JAILD_IMAGE_DIR=$(IMAGE_DIR) $(GO) test $(BUILDFLAGS) -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; done

groups: ## create the jaild (socket access) and jaild-admin groups (root)
	@getent group jaild >/dev/null || groupadd --system jaild
	@getent group jaild-admin >/dev/null || groupadd --system jaild-admin

run: deps rootfs build groups ## build everything and run jaild on $(SOCKET) in the foreground (root)
	./bin/jaild --socket $(SOCKET) --image $(IMAGE_DIR) --seccomp-profile $(CURDIR)/seccomp-profiles/default.json

install: deps rootfs build groups ## install binaries, the rootfs, the seccomp profile, config and systemd units (root)
	install -D -m 0755 bin/jaild $(DESTDIR)$(PREFIX)/bin/jaild
	install -D -m 0755 bin/jailctl $(DESTDIR)$(PREFIX)/bin/jailctl
	install -D -m 0644 seccomp-profiles/default.json $(DESTDIR)$(PREFIX)/share/jaild/seccomp/default.json
	install -D -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/jaild/README.md
	install -d -m 0755 $(DESTDIR)/var/lib/jaild/rootfs
	rm -rf $(DESTDIR)/var/lib/jaild/rootfs/.new && cp -a $$(readlink -f $(IMAGE_DIR)) $(DESTDIR)/var/lib/jaild/rootfs/.new
	rm -rf $(DESTDIR)/var/lib/jaild/rootfs/current && mv $(DESTDIR)/var/lib/jaild/rootfs/.new $(DESTDIR)/var/lib/jaild/rootfs/current
	test -e $(DESTDIR)/etc/jaild/jaild.toml || install -D -m 0644 systemd/jaild.toml $(DESTDIR)/etc/jaild/jaild.toml
	install -D -m 0644 systemd/jaild.socket $(DESTDIR)/etc/systemd/system/jaild.socket
	install -D -m 0644 systemd/jaild.service $(DESTDIR)/etc/systemd/system/jaild.service
	install -D -m 0644 systemd/jaild.sysusers $(DESTDIR)/usr/lib/sysusers.d/jaild.conf
	install -D -m 0644 systemd/jaild.tmpfiles $(DESTDIR)/usr/lib/tmpfiles.d/jaild.conf
	@if [ -d /run/systemd/system ]; then systemctl daemon-reload; echo "now: systemctl enable --now jaild.socket"; fi

deb: vm-deps rootfs ## build dist/jaild_*.deb and dist/jaild-rootfs_*.deb and check them with lintian (root)
	rm -rf dist
	GO=$(GO) IMAGE_DIR=$(IMAGE_DIR) bash deploy/debian/build.sh dist
	bash deploy/debian/lint.sh dist

vm-test: deb rootfs-images ## boot a Debian guest with systemd and cgroup v2 (qemu), install the packages, run the guest suite (root; ~20 min without KVM)
	GO=$(GO) IMAGES_DIR=$(ROOTFS_CACHE) bash tests/vm/run.sh dist

mcp-conformance: rootfs build ## the official MCP conformance suite against jailctl mcp --http (root; npm)
	JAILD_IMAGE_DIR=$(IMAGE_DIR) bash tests/conformance/run.sh

soak: deps rootfs ## the full soak: 10,000 mixed runs at concurrency 16 against one daemon (root; ~11 min)
	JAILD_IMAGE_DIR=$(IMAGE_DIR) JAILD_SOAK_RUNS=$(or $(SOAK_RUNS),10000) $(GO) test $(BUILDFLAGS) -count=1 -timeout 3h -run '^TestSoak$$' -v ./tests/

security-report: deps rootfs ## rerun the hostile-input suite and rewrite docs/SECURITY.md's table (root)
	JAILD_IMAGE_DIR=$(IMAGE_DIR) JAILD_SECURITY_UPDATE=1 $(GO) test $(BUILDFLAGS) -count=1 -timeout 30m -run '^(TestHostile|TestSecurityDocCoversSuite)$$' ./tests/

bench: deps rootfs rootfs-images build ## benchmark jaild against bare python3, and print(1) in every image; prints the table (root)
	./bin/jailbench -jaild bin/jaild -image $(IMAGE_DIR) -images $(ROOTFS_CACHE) -json bench.json

bench-engine: ## Go benchmark of one cold jail (root)
	JAILD_IMAGE_DIR=$(IMAGE_DIR) $(GO) test $(BUILDFLAGS) -run '^$$' -bench . -benchtime 30x ./internal/run/

clean: ## remove build outputs (not the rootfs cache)
	rm -rf bin dist bench.json
