# The two things a user does: bring the lab up, and test the program.
VENV  ?= .venv
PY    := $(VENV)/bin/python
STACK ?= lab
# Pulumi.yaml's backend: local files, no account. The directory must exist before first use.
STATE_DIR := $(HOME)/.pulumi-kamaji-hami-lab

.PHONY: up preview destroy test lint check

$(VENV)/.installed: requirements.txt requirements-dev.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# State lives in ~/.pulumi-kamaji-hami-lab (Pulumi.yaml's backend); secrets use a passphrase.
up: $(VENV)/.installed
	@test -n "$$PULUMI_CONFIG_PASSPHRASE" || { \
	  echo "set PULUMI_CONFIG_PASSPHRASE (it encrypts the stack's secrets)"; exit 1; }
	mkdir -p $(STATE_DIR)
	pulumi stack select --create $(STACK)
	pulumi up --stack $(STACK) $(ARGS)

preview: $(VENV)/.installed
	mkdir -p $(STATE_DIR)
	pulumi preview --stack $(STACK) --diff $(ARGS)

destroy:
	pulumi destroy --stack $(STACK) $(ARGS)

check: $(VENV)/.installed
	$(PY) -m labcheck --stack $(STACK)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint
	$(PY) -m pytest
