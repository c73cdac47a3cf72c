variable "run_name" {
  description = "Names the run: every resource's Name and Run tags start with it."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,30}$", var.run_name))
    error_message = "run_name: 1-31 characters, lowercase letters, digits and '-'."
  }
}

variable "operator_cidr" {
  description = "The only source admitted to SSH (port 22), e.g. \"203.0.113.7/32\": your address."
  type        = string
  validation {
    condition     = can(cidrhost(var.operator_cidr, 0)) && var.operator_cidr != "0.0.0.0/0"
    error_message = "operator_cidr: a CIDR block such as 203.0.113.7/32, not 0.0.0.0/0."
  }
}

variable "ssh_public_key_path" {
  description = "The public half of the SSH key the hosts accept (its private half drives Ansible)."
  type        = string
}

variable "ssh_user" {
  description = "The AMI's login user with passwordless sudo (Debian: admin, Ubuntu: ubuntu)."
  type        = string
  default     = "admin"
}

variable "region" {
  description = "The AWS region (the cost table in deploy/aws_cost.py is us-east-1's)."
  type        = string
  default     = "us-east-1"
}

variable "availability_zone" {
  description = "The subnet's zone; empty lets AWS choose one that has the instance types."
  type        = string
  default     = ""
}

variable "ami_id" {
  description = "The AMI for every host; empty: the latest Debian 12 from ami_ssm_parameter."
  type        = string
  default     = ""
}

variable "ami_ssm_parameter" {
  description = "The public SSM parameter holding an AMI id, read only when ami_id is empty."
  type        = string
  default     = "/aws/service/debian/release/bookworm/latest/amd64"
}

variable "broker_instance_type" {
  description = "The broker host: an i3 for its two NVMe devices (journal and ledgers, seed 002)."
  type        = string
  default     = "i3.4xlarge"
}

variable "broker_nvme_devices" {
  description = "The broker's instance-store devices handed to Ansible ([] = none: no mounts)."
  type        = list(string)
  default     = ["/dev/nvme0n1", "/dev/nvme1n1"]
}

variable "client_count" {
  description = "Client hosts; the first is the coordinator, every other runs `bench worker`."
  type        = number
  default     = 2
  validation {
    condition     = var.client_count >= 1 && var.client_count == floor(var.client_count)
    error_message = "client_count: a whole number, at least 1 (the coordinator)."
  }
}

variable "client_instance_type" {
  description = "The client hosts' type (docs/aws.md sizes them from the client CPU per delivery)."
  type        = string
  default     = "c5.2xlarge"
}

variable "root_volume_gb" {
  description = "Each host's root volume (gp3): the project, its venv and the run folders."
  type        = number
  default     = 30
}

variable "vpc_cidr" {
  description = "The run's VPC; the hosts' private addresses come from its one subnet."
  type        = string
  default     = "10.42.0.0/16"
}

variable "offline_plan" {
  description = "Skip the provider's credential and account checks (offline `plan` in the tests)."
  type        = bool
  default     = false
}
