package roundtrips

// documented is what each path costs per operation, BEGIN and COMMIT
// included: round trips and statements on PostgreSQL through pgx
// (pgxdriver), on PostgreSQL through database/sql with pgx's stdlib
// (pgsqldriver) and on MariaDB (go-sql-driver/mysql), and statements on
// SQLite. docs/benchmarks.md shows the same table with the minimum each
// path needs and why. A change that moves a count fails TestRoundTrips
// until this table and the page say so (TestDocsTable holds the page to the table).
var documented = map[string]struct{ pgRT, pgSt, pgsqlRT, pgsqlSt, myRT, mySt, liteSt int }{
	"bare tx: INSERT (reference)":                           {3, 3, 3, 3, 3, 3, 3},
	"bare tx: UPDATE (reference)":                           {3, 3, 3, 3, 3, 3, 3},
	"dedupe.Do first run":                                   {4, 4, 4, 4, 4, 4, 4},
	"dedupe.Do replay":                                      {3, 3, 3, 3, 4, 4, 4},
	"dedupe.DoResponse first run":                           {5, 5, 5, 5, 5, 5, 5},
	"dedupe.DoResponse replay":                              {3, 3, 3, 3, 4, 4, 4},
	"dedupe.Run first run":                                  {3, 6, 5, 5, 5, 5, 5},
	"dedupe.Run replay":                                     {2, 4, 1, 1, 1, 1, 4},
	"dedupe.Run takeover of a lapsed lease":                 {3, 7, 5, 5, 5, 5, 5},
	"dedupe.Run first run, FavorFirstRuns":                  {3, 6, 4, 4, 4, 4, 5},
	"dedupe.Run replay, FavorFirstRuns":                     {2, 4, 5, 5, 5, 5, 4},
	"dedupe.Run takeover of a lapsed lease, FavorFirstRuns": {3, 7, 6, 6, 6, 6, 5},
	"dedupe.Run first run, FavorRepeats":                    {4, 7, 5, 5, 5, 5, 5},
	"dedupe.Run replay, FavorRepeats":                       {1, 1, 1, 1, 1, 1, 4},
	"dedupe.Run first run, WithNoWait":                      {3, 7, 7, 7, 7, 7, 5},
	"dedupe.Do first run, WithNoWait":                       {4, 8, 6, 6, 6, 6, 4},
	"lease Claim":                                           {1, 1, 1, 1, 1, 1, 1},
	"lease Complete":                                        {1, 1, 1, 1, 1, 1, 1},
	"lease Release":                                         {1, 1, 1, 1, 1, 1, 1},
	"dedupe.RunSteps first run, two steps":                  {7, 7, 7, 7, 7, 7, 7},
	"dedupe.RunSteps first run, one database step":          {6, 6, 6, 6, 6, 6, 6},
	"dedupe.RunSteps replay":                                {1, 1, 1, 1, 1, 1, 1},
	"unique.Insert first run":                               {4, 4, 4, 4, 4, 4, 5},
	"unique.Insert duplicate":                               {6, 5, 6, 5, 5, 5, 7},
	"unique.InsertOrGet duplicate":                          {7, 6, 7, 6, 6, 6, 8},
	"unique.Insert, 10 first runs in one tx":                {31, 31, 31, 31, 22, 22, 32},
	"unique.InsertOne first run":                            {4, 4, 4, 4, 3, 3, 3},
	"unique.InsertOne duplicate":                            {6, 5, 6, 5, 3, 3, 4},
	"unique.InsertOneOrGet duplicate":                       {7, 6, 7, 6, 4, 4, 5},
	"unique.Inserted first run":                             {3, 3, 3, 3, 3, 3, 3},
	"unique.Inserted duplicate":                             {3, 3, 3, 3, 3, 3, 3},
	"unique.Inserted duplicate + read":                      {4, 4, 4, 4, 4, 4, 4},
	"optimistic.Update first run":                           {3, 3, 3, 3, 3, 3, 3},
	"optimistic.Update repeat":                              {4, 4, 4, 4, 4, 4, 4},
	"statemachine.Transition first run":                     {3, 3, 3, 3, 3, 3, 3},
	"statemachine.Transition repeat":                        {4, 4, 4, 4, 4, 4, 4},
	"token.Issue":                                           {1, 1, 1, 1, 1, 1, 1},
	"token.Consume first run":                               {4, 4, 4, 4, 4, 4, 4},
	"token.Consume repeat":                                  {3, 3, 3, 3, 3, 3, 4},
	"inbox.Handle first run":                                {3, 4, 4, 4, 4, 4, 4},
	"inbox.Handle replay":                                   {2, 3, 3, 3, 4, 4, 4},
	"inbox.HandleBatch of 100 ids, first run":               {3, 4, 4, 4, 4, 4, 4},
	"inbox.HandleBatch of 100 ids, replay":                  {2, 3, 3, 3, 3, 3, 4},
	"httpidem first run":                                    {3, 7, 7, 7, 7, 7, 5},
	"httpidem replay":                                       {2, 5, 5, 5, 6, 6, 4},
}
