# One run's hosts: a VPC with one public subnet, a broker host and N client hosts (the first
# is the coordinator). Outside the VPC only SSH from the operator's address gets in; the
# bench's own ports are open only between hosts that carry this run's security group.

locals {
  ami_id = var.ami_id != "" ? var.ami_id : nonsensitive(data.aws_ssm_parameter.ami[0].value)
  # The coordinator and the remote workers need the broker; Locust workers join the master;
  # Spark's standalone master, its workers and the analysis driver reach each other.
  bench_ports = {
    broker        = 6650 # Pulsar binary protocol (bench broker)
    broker_admin  = 8080 # the broker's admin HTTP API
    locust_master = 5557 # bench worker --master joins the coordinator here
    spark_master  = 7077 # spark://coordinator:7077 (bench analyze --spark-master)
    spark_worker  = 7078 # a Spark worker's RPC port when the playbooks start one
  }
  # The Spark driver, executors and block managers listen on ports the kernel picks from
  # its ephemeral range (Linux: 32768-60999), so that range is open between the hosts too.
  ephemeral = { from = 32768, to = 60999 }
}

# Read only when no ami_id is given (an offline plan passes one, so it makes no AWS call).
data "aws_ssm_parameter" "ami" {
  count = var.ami_id == "" ? 1 : 0
  name  = var.ami_ssm_parameter
}

resource "aws_vpc" "bench" {
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = { Name = "${var.run_name}-vpc" }
}

resource "aws_internet_gateway" "bench" {
  vpc_id = aws_vpc.bench.id
  tags   = { Name = "${var.run_name}-igw" }
}

resource "aws_subnet" "bench" {
  vpc_id                  = aws_vpc.bench.id
  cidr_block              = cidrsubnet(var.vpc_cidr, 8, 1)
  availability_zone       = var.availability_zone != "" ? var.availability_zone : null
  map_public_ip_on_launch = true
  tags                    = { Name = "${var.run_name}-subnet" }
}

resource "aws_route_table" "bench" {
  vpc_id = aws_vpc.bench.id
  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.bench.id
  }
  tags = { Name = "${var.run_name}-routes" }
}

resource "aws_route_table_association" "bench" {
  subnet_id      = aws_subnet.bench.id
  route_table_id = aws_route_table.bench.id
}

resource "aws_security_group" "bench" {
  name        = "${var.run_name}-bench"
  description = "fan-out bench ${var.run_name}: SSH from the operator, bench ports between its hosts"
  vpc_id      = aws_vpc.bench.id
  tags        = { Name = "${var.run_name}-bench" }
}

resource "aws_vpc_security_group_ingress_rule" "ssh" {
  security_group_id = aws_security_group.bench.id
  description       = "SSH from the operator only"
  cidr_ipv4         = var.operator_cidr
  ip_protocol       = "tcp"
  from_port         = 22
  to_port           = 22
}

resource "aws_vpc_security_group_ingress_rule" "bench_port" {
  for_each                     = local.bench_ports
  security_group_id            = aws_security_group.bench.id
  description                  = "${each.key} between the run's hosts"
  referenced_security_group_id = aws_security_group.bench.id
  ip_protocol                  = "tcp"
  from_port                    = each.value
  to_port                      = each.value
}

resource "aws_vpc_security_group_ingress_rule" "spark_ephemeral" {
  security_group_id            = aws_security_group.bench.id
  description                  = "Spark driver/executor/block manager ports between the run's hosts"
  referenced_security_group_id = aws_security_group.bench.id
  ip_protocol                  = "tcp"
  from_port                    = local.ephemeral.from
  to_port                      = local.ephemeral.to
}

resource "aws_vpc_security_group_egress_rule" "all" {
  security_group_id = aws_security_group.bench.id
  description       = "Packages, PyPI, NTP and the bench's own traffic"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "-1"
}

resource "aws_key_pair" "operator" {
  key_name   = "${var.run_name}-operator"
  public_key = file(pathexpand(var.ssh_public_key_path))
}

resource "aws_instance" "broker" {
  ami                    = local.ami_id
  instance_type          = var.broker_instance_type
  subnet_id              = aws_subnet.bench.id
  vpc_security_group_ids = [aws_security_group.bench.id]
  key_name               = aws_key_pair.operator.key_name

  root_block_device {
    volume_type = "gp3"
    volume_size = var.root_volume_gb
  }
  metadata_options {
    http_tokens = "required"
  }
  tags = { Name = "${var.run_name}-broker", Role = "broker" }
}

resource "aws_instance" "client" {
  count                  = var.client_count
  ami                    = local.ami_id
  instance_type          = var.client_instance_type
  subnet_id              = aws_subnet.bench.id
  vpc_security_group_ids = [aws_security_group.bench.id]
  key_name               = aws_key_pair.operator.key_name

  root_block_device {
    volume_type = "gp3"
    volume_size = var.root_volume_gb
  }
  metadata_options {
    http_tokens = "required"
  }
  tags = {
    Name = "${var.run_name}-client-${count.index}"
    Role = count.index == 0 ? "coordinator" : "worker"
  }
}
