#!/usr/bin/python3
# run_tests: background (most of its time is pip waiting on PyPI; tests/run_tests.sh)
"""test_sagemaker_sdk.py: scripts/sagemaker/launch.py against the real
SageMaker Python SDKs from PyPI, v3 (ModelTrainer) and v2 (Estimator), each
in a venv under build/ (installed once), with no network: botocore's Stubber
answers CreateTrainingJob, botocore validates the request against the
SageMaker service model before the Stubber sees it, any other AWS call fails
the test, HTTP(S) goes to a closed port, and SDK telemetry is opted out.
Both SDKs must send the job launch.py describes (--dry-run's JSON): image,
role, instances, spot and stopping times, hyperparameters with the mpi
settings, channels, checkpoints, output, environment, metric definitions.
Skips (with the reason) only where PyPI cannot be reached."""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pycheck import fail, finish, ok  # noqa: E402
SDKS = [("v3", "sagemaker>=3,<4"), ("v2", "sagemaker>=2.200,<3")]


def venv_python(tag, requirement):
    """build/sagemaker-TAG-venv's python with `requirement`, installing it once; None when PyPI is unreachable."""
    d = f"build/sagemaker-{tag}-venv"
    py = os.path.join(d, "bin", "python")
    if os.path.exists(os.path.join(d, ".complete")):
        return py, ""
    print(f"# installing {requirement} into {d} (once)", flush=True)
    log = []
    for cmd in ([sys.executable, "-m", "venv", d], [py, "-m", "pip", "install", "-q", requirement]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        log.append(r.stdout + r.stderr)
        if r.returncode != 0:
            return None, "".join(log)[-600:]
    open(os.path.join(d, ".complete"), "w").close()
    return py, ""


# What runs inside each venv: launch.py's launch() with a stubbed client.
CHILD = r'''
import json, os, sys
import boto3
from botocore.stub import Stubber
sys.path.insert(0, "scripts/sagemaker")
import launch

args = launch.parse_args(json.loads(sys.argv[1]))
spec = launch.job_spec(args)
boto_session = boto3.Session(region_name="us-west-2", aws_access_key_id="AKIDTEST", aws_secret_access_key="secret")
client = boto_session.client("sagemaker")
# Every SageMaker client the SDK makes from this session is the stubbed one
# (v3's sagemaker-core makes its own from the boto3 session).
make_client = boto_session.client
boto_session.client = lambda name, *a, **kw: client if name == "sagemaker" else make_client(name, *a, **kw)
seen = {}
client.meta.events.register("provide-client-params.sagemaker.CreateTrainingJob",
                            lambda params, **kw: seen.update(request=dict(params)))
stub = Stubber(client)
arn = "arn:aws:sagemaker:us-west-2:123456789012:training-job/x"
stub.add_response("create_training_job", {"TrainingJobArn": arn})
if launch.sdk_major() >= 3:
    # v3 describes the job it created (and returns it as a resource).
    import datetime
    stub.add_response("describe_training_job", {
        "TrainingJobName": "train-gpt-x", "TrainingJobArn": arn, "ModelArtifacts": {"S3ModelArtifacts": "s3://bucket/m"},
        "TrainingJobStatus": "InProgress", "SecondaryStatus": "Starting",
        "AlgorithmSpecification": {"TrainingInputMode": "File"},
        "ResourceConfig": {"VolumeSizeInGB": 100, "InstanceType": "ml.p5.48xlarge", "InstanceCount": 2},
        "StoppingCondition": {"MaxRuntimeInSeconds": 7200}, "CreationTime": datetime.datetime(2026, 1, 1)})
stub.activate()
opt_out = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}
if launch.sdk_major() >= 3:
    from sagemaker.core.helper.session_helper import Session
else:
    from sagemaker.session import Session
session = Session(boto_session=boto_session, sagemaker_client=client, sagemaker_config=opt_out)
launch.launch(spec, wait=False, session=session)
stub.assert_no_pending_responses()
# botocore validated the request against the service model before the stub
# answered (parameter_validation is on); the same check once more, explicitly.
from botocore.validate import ParamValidator
shape = client.meta.service_model.operation_model("CreateTrainingJob").input_shape
report = ParamValidator().validate(seen["request"], shape)
print("REQUEST " + json.dumps({"sdk": launch.sdk_major(), "request": seen.get("request"), "spec": spec,
                               "validated": client.meta.config.parameter_validation and not report.has_errors(),
                               "errors": report.generate_report()}, default=str))
'''

ARGS = ["--image-uri", "123456789012.dkr.ecr.us-west-2.amazonaws.com/train-gpt:1",
        "--role", "arn:aws:iam::123456789012:role/SageMakerTraining", "--instance-type", "ml.p5.48xlarge",
        "--instance-count", "2", "--spot", "--max-run", "7200", "--checkpoint-s3-uri", "s3://bucket/run-1/checkpoints",
        "--output-path", "s3://bucket/run-1/output", "--train", "s3://bucket/data/train/", "--val", "s3://bucket/data/val/",
        "--hp", "model=gpt2-1558M", "--hp", "steps=32000", "--env", "NCCL_DEBUG=INFO", "--no-wait"]


def check_request(tag, out):
    """The CreateTrainingJob request against the job launch.py describes."""
    line = [x for x in out.splitlines() if x.startswith("REQUEST ")]
    if not line:
        return f"no request captured: {out[-800:]}"
    got = json.loads(line[-1][len("REQUEST "):])
    r, e = got["request"], got["spec"]["estimator"]
    hp = r.get("HyperParameters", {})
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in r.get("InputDataConfig", [])}
    want_metrics = {m["Name"]: m["Regex"] for m in e["metric_definitions"]}
    got_metrics = {m["Name"]: m["Regex"] for m in r.get("AlgorithmSpecification", {}).get("MetricDefinitions", [])}
    checks = [
        (got["validated"], f"the request does not validate against the service model: {got['errors']}"),
        (str(got["sdk"]) == tag[1], f"SDK major {got['sdk']}"),
        (r["AlgorithmSpecification"]["TrainingImage"] == e["image_uri"], "image"),
        (r["AlgorithmSpecification"]["TrainingInputMode"] == "File", "input mode"),
        (r["RoleArn"] == e["role"], "role"),
        (r["ResourceConfig"]["InstanceType"] == "ml.p5.48xlarge" and r["ResourceConfig"]["InstanceCount"] == 2, "instances"),
        (r["ResourceConfig"]["VolumeSizeInGB"] == e["volume_size"], "volume"),
        (r.get("EnableManagedSpotTraining") is True, "spot"),
        (r["StoppingCondition"].get("MaxRuntimeInSeconds") == 7200 and
         r["StoppingCondition"].get("MaxWaitTimeInSeconds") == e["max_wait"], f"stopping {r['StoppingCondition']}"),
        (all(hp.get(k) == v for k, v in e["hyperparameters"].items()), f"hyperparameters {hp}"),
        (hp.get("sagemaker_mpi_num_of_processes_per_host") == "8" and hp.get("steps") == "32000", "mpi hyperparameters"),
        (channels == {"train": "s3://bucket/data/train/", "val": "s3://bucket/data/val/"}, f"channels {channels}"),
        (r.get("CheckpointConfig") == {"S3Uri": "s3://bucket/run-1/checkpoints", "LocalPath": "/opt/ml/checkpoints"},
         f"checkpoints {r.get('CheckpointConfig')}"),
        (r.get("OutputDataConfig", {}).get("S3OutputPath", "").rstrip("/") == "s3://bucket/run-1/output",
         f"output {r.get('OutputDataConfig')}"),
        (r.get("Environment") == {"NCCL_DEBUG": "INFO"}, f"environment {r.get('Environment')}"),
        (got_metrics == want_metrics, f"metric definitions: {sorted(got_metrics)} vs {sorted(want_metrics)}"),
        (r["TrainingJobName"].startswith("train-gpt-"), f"job name {r['TrainingJobName']}"),
    ]
    bad = [why for good, why in checks if not good]
    return "; ".join(bad)


# (SAGEMAKER_VALIDATE_ROLE: v3 checks the role with IAM calls, which need the network)
env = dict(os.environ, SAGEMAKER_VALIDATE_ROLE="false", SAGEMAKER_SUPPRESS_V2_WARNING="1", AWS_EC2_METADATA_DISABLED="true", HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9",
           NO_PROXY="", AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
# Both SDKs install at once: pip mostly waits on PyPI, so the two installs
# overlap (about half of this test's time on a fresh machine).
with ThreadPoolExecutor(len(SDKS)) as pool:
    venvs = list(pool.map(lambda sdk: venv_python(*sdk), SDKS))
for (tag, requirement), (py, why) in zip(SDKS, venvs):
    name = f"launch_creates_job_sdk_{tag}"
    if py is None:
        if "Could not find" in why or "connection" in why.lower() or "network" in why.lower() or "resolve" in why.lower():
            print(f"# {name} skipped: PyPI is unreachable ({why.strip().splitlines()[-1] if why.strip() else '?'})")
            continue
        fail(name, f"installing {requirement} failed: {why}")
        continue
    r = subprocess.run([py, "-c", CHILD, json.dumps(ARGS)], capture_output=True, text=True, env=env, timeout=300)
    problem = check_request(tag, r.stdout) if r.returncode == 0 else f"exit {r.returncode}: {r.stderr[-1500:]}"
    if problem:
        fail(name, problem)
    else:
        ok(name)
finish()
