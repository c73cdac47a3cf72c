# The AWS provider only. Pinned to the version the offline checks run against (the machine
# image's filesystem mirror of hashicorp/aws); .terraform.lock.hcl is written by `init`.
terraform {
  required_version = ">= 1.5.0"

  # The state stays on the operator's machine: `make aws-up` passes
  # -backend-config=path=<repo>/deploy/aws/.state/terraform.tfstate (gitignored).
  backend "local" {}

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "= 5.100.0"
    }
  }
}

provider "aws" {
  region = var.region

  # `offline_plan = true` lets `terraform plan` run without credentials or network (the test
  # suite's check, with dummy keys in its environment); `make aws-up` leaves it false so bad
  # credentials fail at once, not half-way through an apply.
  skip_credentials_validation = var.offline_plan
  skip_requesting_account_id  = var.offline_plan
  skip_metadata_api_check     = var.offline_plan
  skip_region_validation      = var.offline_plan

  default_tags {
    tags = {
      Project = "fanout-bench"
      Run     = var.run_name
    }
  }
}
