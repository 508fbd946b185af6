#!/usr/bin/env python3
"""launch.py: start a train_gpt training job on Amazon SageMaker.

The job runs the train_gpt image (scripts/sagemaker/Dockerfile) on
--instance-count hosts with one rank per GPU. Hyperparameters are
train_gpt's flags without the dashes (`--hp steps=20000 --hp lr=6e-4`);
SageMaker hands them to the container as strings in hyperparameters.json,
which train_gpt reads itself. Data channels (train, val, tokenizer) are S3
prefixes holding llm.c token shards (*.bin / *.bin.zst) and tokenizer.bin.

The job is a bring-your-own-image training job with SageMaker's mpi
distribution expressed the way the SDK's framework estimators pass it to a
container: as the hyperparameters sagemaker_mpi_enabled,
sagemaker_mpi_num_of_processes_per_host and sagemaker_mpi_custom_mpi_options,
which the image's entrypoint honours. It is created through whichever
SageMaker Python SDK is installed: v3's ModelTrainer, or v2's generic
Estimator (v2 now warns that it is deprecated); both send the same
CreateTrainingJob request (tests/test_sagemaker_sdk.py checks it for each).

    pip install 'sagemaker>=3'      # or 'sagemaker>=2.200,<3'
    scripts/sagemaker/launch.py --image-uri ACCOUNT.dkr.ecr.REGION.amazonaws.com/train-gpt:latest \\
        --role arn:aws:iam::ACCOUNT:role/SageMakerRole --instance-type ml.p5.48xlarge --instance-count 2 \\
        --train s3://bucket/fineweb/train/ --val s3://bucket/fineweb/val/ \\
        --checkpoint-s3-uri s3://bucket/train-gpt/run-1/checkpoints --spot \\
        --hp model=gpt2-1558M --hp steps=32000 --hp batch-tokens=1048576

--dry-run prints the job it would create (the Estimator's arguments, the
inputs and the job name) as JSON, without the SDK and without calling AWS.
"""
import argparse
import json
import os
import re
import sys
import time

# GPUs per host of the instance types train_gpt is tuned for; one rank each.
INSTANCE_GPUS = {
    "ml.p5.48xlarge": 8,       # 8x H100 80 GB, 3,200 Gbps EFA
    "ml.p5en.48xlarge": 8,     # 8x H200 141 GB, 3,200 Gbps EFA
    "ml.p6-b200.48xlarge": 8,  # 8x B200 179 GB, 3,200 Gbps EFA
}

# What SageMaker extracts from the job's log into CloudWatch metrics (a name
# and a regex whose first group is the value): the list llm/report/README.md documents
# under this marker, read from there so that it lives in one place;
# tests/test_metrics.sh checks each regex against a real run's log.
README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "llm", "report", "README.md")
METRICS_MARKER = "<!-- sagemaker-metric-definitions -->"


def metric_definitions():
    try:
        with open(README) as f:
            block = f.read().split(METRICS_MARKER, 1)[1].split("```", 2)[1].split("\n", 1)[1]
        return json.loads(block)
    except (OSError, IndexError, ValueError) as e:
        sys.exit(f"launch.py: cannot read the metric definitions after {METRICS_MARKER} in {README}: {e}")


DAY = 24 * 3600


def key_value(text):
    """KEY=VALUE for --hp and --env."""
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError(f"'{text}' is not KEY=VALUE")
    key, value = text.split("=", 1)
    return key, value


def s3_uri(text):
    if not re.match(r"^s3://[^/]+(/.*)?$", text):
        raise argparse.ArgumentTypeError(f"'{text}' is not an s3:// URI")
    return text


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image-uri", required=True, help="the train_gpt image in ECR")
    p.add_argument("--role", required=True, help="IAM role ARN the job runs as")
    p.add_argument("--instance-type", default="ml.p5.48xlarge",
                   help="one of " + ", ".join(INSTANCE_GPUS) + " (others need --gpus-per-host)")
    p.add_argument("--instance-count", type=int, default=1, help="hosts")
    p.add_argument("--gpus-per-host", type=int, help="ranks per host (default: the instance type's GPUs)")
    p.add_argument("--custom-mpi-options", default="", help="extra mpirun options, e.g. '--bind-to numa'")
    p.add_argument("--train", type=s3_uri, help="S3 prefix of the training shards (channel 'train')")
    p.add_argument("--val", type=s3_uri, help="S3 prefix of the validation shards (channel 'val')")
    p.add_argument("--tokenizer", type=s3_uri, help="S3 prefix holding tokenizer.bin (channel 'tokenizer')")
    p.add_argument("--input-mode", default="File", choices=["File", "FastFile"],
                   help="File copies the shards to each host before training; FastFile streams them (large corpora)")
    p.add_argument("--hp", type=key_value, action="append", default=[], metavar="FLAG=VALUE",
                   help="a train_gpt flag without the dashes, e.g. steps=20000 (repeatable)")
    p.add_argument("--env", type=key_value, action="append", default=[], metavar="NAME=VALUE",
                   help="environment of every rank, e.g. NCCL_DEBUG=INFO (repeatable)")
    p.add_argument("--checkpoint-s3-uri", type=s3_uri,
                   help="S3 prefix synced with /opt/ml/checkpoints; use one per run lineage")
    p.add_argument("--checkpoint-local-path", default="/opt/ml/checkpoints")
    p.add_argument("--output-path", type=s3_uri, help="where model.tar.gz (the final weights) goes")
    p.add_argument("--spot", action="store_true", help="managed spot training (needs --checkpoint-s3-uri)")
    p.add_argument("--max-run", type=int, default=DAY, help="seconds of training before SageMaker stops the job")
    p.add_argument("--max-wait", type=int, help="spot: seconds of training plus waiting for capacity (default max-run + 1 day)")
    p.add_argument("--volume-size", type=int, default=100,
                   help="GB of EBS per host (instances with NVMe instance store, such as these, use that instead)")
    p.add_argument("--max-retries", type=int, help="retries of a job that fails with an internal SageMaker error")
    p.add_argument("--subnets", nargs="*", help="VPC subnets (EFA needs a security group open to itself)")
    p.add_argument("--security-group-ids", nargs="*")
    p.add_argument("--base-job-name", default="train-gpt")
    p.add_argument("--no-wait", action="store_true", help="return once the job is created")
    p.add_argument("--dry-run", action="store_true", help="print the job as JSON; do not call AWS")
    args = p.parse_args(argv)

    if args.instance_count < 1:
        p.error("--instance-count must be at least 1")
    if args.gpus_per_host is None:
        if args.instance_type not in INSTANCE_GPUS:
            p.error(f"--instance-type {args.instance_type} is not one of {', '.join(INSTANCE_GPUS)}; give --gpus-per-host")
        args.gpus_per_host = INSTANCE_GPUS[args.instance_type]
    if args.gpus_per_host < 1:
        p.error("--gpus-per-host must be at least 1")
    if args.spot:
        if not args.checkpoint_s3_uri:
            p.error("--spot needs --checkpoint-s3-uri: an interrupted spot job resumes from its checkpoints, "
                    "without them it starts over")
        if args.max_wait is None:
            args.max_wait = args.max_run + DAY
        if args.max_wait < args.max_run:
            p.error(f"--max-wait {args.max_wait} must be at least --max-run {args.max_run}")
    elif args.max_wait is not None:
        p.error("--max-wait applies to --spot jobs only")
    names = [k for k, _ in args.hp]
    for k in names:
        if k.startswith("sagemaker_"):
            p.error(f"--hp {k}: sagemaker_* hyperparameters are set by this launcher")
        if names.count(k) > 1:
            p.error(f"--hp {k} is given twice")
    return args


def job_spec(args):
    """The Estimator's keyword arguments, the inputs and the job name: what --dry-run prints."""
    distribution = {"mpi": {"enabled": True, "processes_per_host": args.gpus_per_host,
                            "custom_mpi_options": args.custom_mpi_options}}
    # SageMaker passes hyperparameters as strings; so do we, visibly.
    hyperparameters = {k: str(v) for k, v in args.hp}
    hyperparameters.update({
        "sagemaker_mpi_enabled": "true",
        "sagemaker_mpi_num_of_processes_per_host": str(args.gpus_per_host),
        "sagemaker_mpi_custom_mpi_options": args.custom_mpi_options,
    })
    estimator = {
        "image_uri": args.image_uri,
        "role": args.role,
        "instance_type": args.instance_type,
        "instance_count": args.instance_count,
        "volume_size": args.volume_size,
        "max_run": args.max_run,
        "input_mode": args.input_mode,
        "base_job_name": args.base_job_name,
        "hyperparameters": hyperparameters,
        "metric_definitions": metric_definitions(),
        "enable_sagemaker_metrics": True,
        "environment": dict(args.env),
        "use_spot_instances": args.spot,
        "checkpoint_local_path": args.checkpoint_local_path,
        # No Debugger hooks or profiler rules: they need SageMaker's Python
        # libraries in the image and start extra processing jobs.
        "debugger_hook_config": False,
        "disable_profiler": True,
    }
    optional = {"max_wait": args.max_wait, "checkpoint_s3_uri": args.checkpoint_s3_uri,
                "output_path": args.output_path, "max_retry_attempts": args.max_retries,
                "subnets": args.subnets, "security_group_ids": args.security_group_ids}
    estimator.update({k: v for k, v in optional.items() if v is not None})
    inputs = {name: {"s3_data": uri, "distribution": "FullyReplicated", "input_mode": args.input_mode}
              for name, uri in (("train", args.train), ("val", args.val), ("tokenizer", args.tokenizer)) if uri}
    job_name = f"{args.base_job_name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    return {"estimator": estimator, "distribution": distribution, "inputs": inputs, "job_name": job_name,
            "hosts": args.instance_count, "ranks": args.instance_count * args.gpus_per_host}


def sdk_major():
    """The installed SageMaker Python SDK's major version, or None."""
    from importlib import metadata
    try:
        return int(metadata.version("sagemaker").split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        return None


def launch(spec, wait, session=None):
    """Creates the job through the installed SDK (session: a sagemaker Session, for tests)."""
    major = sdk_major()
    if major is None:
        sys.exit("launch.py: the SageMaker Python SDK is not installed: pip install 'sagemaker>=3' (or 'sagemaker>=2.200,<3')")
    if major >= 3:
        launch_v3(spec, wait, session)
    else:
        launch_v2(spec, wait, session)


def launch_v2(spec, wait, session):
    # Imported here so that --dry-run works where the SDK is not installed.
    from sagemaker.estimator import Estimator
    from sagemaker.inputs import TrainingInput

    kwargs = dict(spec["estimator"])
    if session is not None:
        kwargs["sagemaker_session"] = session
    estimator = Estimator(**kwargs)
    inputs = {name: TrainingInput(**channel) for name, channel in spec["inputs"].items()}
    estimator.fit(inputs or None, job_name=spec["job_name"], wait=wait, logs="All" if wait else "None")
    print(f"training job {spec['job_name']}: model artifacts -> {estimator.output_path}")


def launch_v3(spec, wait, session):
    # v3: one ModelTrainer for every kind of job, configured by small objects.
    from sagemaker.train import ModelTrainer
    from sagemaker.train.configs import (CheckpointConfig, Compute, InputData, MetricDefinition, Networking,
                                         OutputDataConfig, RetryStrategy, S3DataSource, StoppingCondition)

    e = spec["estimator"]
    kwargs = dict(
        training_image=e["image_uri"],
        role=e["role"],
        base_job_name=e["base_job_name"],
        training_input_mode=e["input_mode"],
        compute=Compute(instance_type=e["instance_type"], instance_count=e["instance_count"],
                        volume_size_in_gb=e["volume_size"], enable_managed_spot_training=e["use_spot_instances"]),
        stopping_condition=StoppingCondition(max_runtime_in_seconds=e["max_run"],
                                             max_wait_time_in_seconds=e.get("max_wait")),
        hyperparameters=e["hyperparameters"],
        environment=e["environment"],
        checkpoint_config=CheckpointConfig(s3_uri=e.get("checkpoint_s3_uri"), local_path=e["checkpoint_local_path"]),
    )
    if e.get("output_path"):
        kwargs["output_data_config"] = OutputDataConfig(s3_output_path=e["output_path"])
    if e.get("subnets") or e.get("security_group_ids"):
        kwargs["networking"] = Networking(subnets=e.get("subnets"), security_group_ids=e.get("security_group_ids"))
    if session is not None:
        kwargs["sagemaker_session"] = session
    trainer = ModelTrainer(**kwargs).with_metric_definitions(
        [MetricDefinition(name=m["Name"], regex=m["Regex"]) for m in e["metric_definitions"]])
    if e.get("max_retry_attempts") is not None:
        trainer = trainer.with_retry_strategy(RetryStrategy(maximum_retry_attempts=e["max_retry_attempts"]))
    inputs = [InputData(channel_name=name, data_source=S3DataSource(
        s3_data_type="S3Prefix", s3_uri=c["s3_data"], s3_data_distribution_type=c["distribution"]))
        for name, c in spec["inputs"].items()]
    trainer.train(input_data_config=inputs or None, wait=wait, logs=wait)
    job = getattr(trainer, "_latest_training_job", None)
    name = getattr(job, "training_job_name", None) or f"{e['base_job_name']}-..."
    print(f"training job {name}: created with the SageMaker Python SDK v3")


def main(argv):
    args = parse_args(argv)
    spec = job_spec(args)
    if args.dry_run:
        json.dump(spec, sys.stdout, indent=2)
        print()
        return 0
    launch(spec, wait=not args.no_wait)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
