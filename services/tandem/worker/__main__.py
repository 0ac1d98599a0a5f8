from tandem.worker.main import main

raise SystemExit(main())
