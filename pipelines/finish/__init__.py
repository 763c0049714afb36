"""The end of a run, whoever ran it: the run-finish contract (`contract`), the run's folder
(`run_folder`), the artifact readers (`artifacts`, `training_summary`), the report page
(`report`, `charts`, `templates/`), the alert (`alerts`) and the run's metrics (`metrics`).

It sits below the executors (components/) and above serving state: the local runner, Airflow's
final task and Kubeflow's exit handler (an executor) all call it.
"""
